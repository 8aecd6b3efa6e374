//! Connections over raw TCP: a client that sends its request head too slowly, or sends nothing
//! more on a kept-alive connection, is disconnected after the header read timeout; at the
//! connection cap the server accepts no more until one closes, and no more than the cap are
//! ever held; a graceful stop lets an in-flight request finish and is not held up by idle or
//! stalled clients.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use memlayer_llm::{ChatClient, Reply};
use memlayer_server::ServerConfig;
use memlayer_tests::{TestServer, json, send};

/// The header read timeout of these tests' servers: short, so the tests are.
const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
/// Far past [`HEADER_TIMEOUT`] on a busy machine: a connection still open this long was not
/// cut off by it.
const PATIENCE: Duration = Duration::from_secs(15);

fn server(max_connections: usize) -> TestServer {
    TestServer::with_config(ServerConfig {
        header_read_timeout: HEADER_TIMEOUT,
        max_connections,
        ..memlayer_tests::config()
    })
}

/// A connection to `server` that gives up reading after [`PATIENCE`].
fn connect(server: &TestServer) -> TcpStream {
    let stream = TcpStream::connect(server.addr()).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
}

/// Reads until the server closes the connection; answers what it sent and when it closed.
/// Panics if it is still open after [`PATIENCE`].
fn read_until_closed(stream: &mut TcpStream) -> (String, Instant) {
    let mut received = Vec::new();
    let mut buffer = [0; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => received.extend_from_slice(&buffer[..read]),
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!(
                    "the connection is still open after {PATIENCE:?}; received {:?}",
                    String::from_utf8_lossy(&received)
                )
            }
            // A reset is a close too.
            Err(_) => break,
        }
    }
    (
        String::from_utf8_lossy(&received).into_owned(),
        Instant::now(),
    )
}

const HEALTH: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: memlayer\r\n\r\n";

#[test]
fn a_client_that_stalls_in_its_request_head_is_disconnected() {
    let server = server(16);
    let mut stalled = connect(&server);
    let started = Instant::now();
    stalled.write_all(b"GET /healthz HTT").unwrap();
    let (answer, closed) = read_until_closed(&mut stalled);
    let after = closed - started;
    assert!(
        after >= HEADER_TIMEOUT - Duration::from_millis(100),
        "closed after {after:?}, before the timeout"
    );
    assert!(!answer.contains("200 OK"), "{answer}");
    // The server itself is fine.
    assert_eq!(server.get("/healthz").0, 200);
}

/// hyper's header read timeout also runs while a kept-alive connection waits for its next
/// request, so an idle connection cannot hold a slot for longer than that either.
#[test]
fn an_idle_kept_alive_connection_is_closed_after_the_header_timeout() {
    let server = server(16);
    let mut idle = connect(&server);
    idle.write_all(HEALTH).unwrap();
    let mut first = [0; 1024];
    let read = idle.read(&mut first).unwrap();
    let answered = Instant::now();
    let head = String::from_utf8_lossy(&first[..read]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    let (_, closed) = read_until_closed(&mut idle);
    let after = closed - answered;
    assert!(
        after >= HEADER_TIMEOUT - Duration::from_millis(100),
        "closed after {after:?}, before the timeout"
    );
}

/// With a cap of two connections, four idle clients are held two at a time (each for the
/// header timeout), and a real request behind them is served once the timeouts freed the
/// slots.
#[test]
fn at_the_connection_cap_idle_clients_are_held_two_at_a_time_and_then_a_request_is_served() {
    let server = server(2);
    let started = Instant::now();
    let idle: Vec<TcpStream> = (0..4).map(|_| connect(&server)).collect();
    // The kernel queues connections in order; the request comes last.
    std::thread::sleep(Duration::from_millis(200));
    let mut request = connect(&server);
    request.write_all(HEALTH).unwrap();
    let (closes, answered) = std::thread::scope(|scope| {
        let waiting: Vec<_> = idle
            .into_iter()
            .map(|mut stream| scope.spawn(move || read_until_closed(&mut stream).1))
            .collect();
        let mut head = [0; 1024];
        let read = request.read(&mut head).unwrap();
        let answered = Instant::now();
        let head = String::from_utf8_lossy(&head[..read]).into_owned();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let mut closes: Vec<Instant> = waiting.into_iter().map(|t| t.join().unwrap()).collect();
        closes.sort();
        (closes, answered)
    });
    let at = |instant: Instant| instant - started;
    let closes: Vec<Duration> = closes.into_iter().map(at).collect();
    // Had the server held more than two at once, the third would have closed with the
    // first, one timeout after the start.
    assert!(
        closes[2] >= closes[0] + HEADER_TIMEOUT - Duration::from_millis(200),
        "more than two idle connections were held at once: closed at {closes:?}"
    );
    // The request was accepted only once a slot was free.
    assert!(
        at(answered) + Duration::from_millis(100) >= closes[2],
        "answered at {:?}, idle connections closed at {closes:?}",
        at(answered)
    );
}

/// A graceful stop lets the request in flight finish with its answer, though an idle
/// kept-alive client and a client stalled in its request head are still connected.
#[test]
fn a_graceful_stop_finishes_the_request_in_flight_despite_idle_and_stalled_clients() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let mut server = TestServer::with_config(ServerConfig {
        agent_model: Some(ChatClient::new(upstream.config()).unwrap()),
        header_read_timeout: HEADER_TIMEOUT,
        ..memlayer_tests::config()
    });
    upstream.push(Reply::text("Finished before the stop.").after(Duration::from_secs(2)));
    let mut idle = connect(&server);
    idle.write_all(HEALTH).unwrap();
    let mut first = [0; 1024];
    assert!(idle.read(&mut first).unwrap() > 0);
    let mut stalled = connect(&server);
    stalled
        .write_all(b"POST /v1/sessions HTTP/1.1\r\nHost: memlayer\r\nContent-Le")
        .unwrap();

    let client = server.client().clone();
    let url = format!("{}/v1/agents/support/runs", server.base_url());
    let in_flight = std::thread::spawn(move || {
        send(
            client
                .post(url)
                .json(&json!({ "user_id": "val", "message": "Are you still there?" })),
        )
    });
    for _ in 0..400 {
        if !upstream.requests().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(upstream.requests().len(), 1, "the run reached the model");
    let addr = server.addr();
    let stopping = Instant::now();
    server.stop();
    let (status, answer) = in_flight.join().unwrap();
    assert_eq!(
        (status, &answer["content"]),
        (200, &json!("Finished before the stop.")),
        "{answer}"
    );
    assert!(
        stopping.elapsed() < PATIENCE,
        "the stop took {:?}",
        stopping.elapsed()
    );
    assert!(
        TcpStream::connect(addr).is_err(),
        "still accepting after the stop"
    );
    server.restart();
    let (_, sessions) = server.get("/v1/sessions?user_id=val");
    let session = sessions["content"][0]["session_id"].as_str().unwrap();
    let (_, runs) = server.get(&format!("/v1/sessions/{session}/runs"));
    assert_eq!(runs[0]["status"], "COMPLETED", "{runs}");
}
