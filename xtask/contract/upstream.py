"""A stand-in for the OpenAI-compatible chat model an operator configures as [agent_model]:
enough of the wire format (chat.completion, and chat.completion.chunk events when streamed)
for agent runs to complete while schemathesis exercises `POST /v1/agents/{agent_id}/runs`.
It answers every request with the same short text and never asks for a tool. Standard
library only; prints the port it listens on, then serves until killed."""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = "Noted."


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        model = request.get("model", "stand-in")
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        base = {"id": "chatcmpl-stand-in", "created": int(time.time()), "model": model}
        if request.get("stream"):
            chunks = [
                {"index": 0, "delta": {"role": "assistant", "content": ANSWER}, "finish_reason": None},
                {"index": 0, "delta": {}, "finish_reason": "stop"},
            ]
            events = [
                dict(base, object="chat.completion.chunk", choices=[choice]) for choice in chunks
            ]
            events.append(dict(base, object="chat.completion.chunk", choices=[], usage=usage))
            body = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
            body += "data: [DONE]\n\n"
            self.answer(body.encode(), "text/event-stream")
        else:
            message = {"role": "assistant", "content": ANSWER}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            completion = dict(base, object="chat.completion", choices=[choice], usage=usage)
            self.answer(json.dumps(completion).encode(), "application/json")

    def answer(self, body, content_type):
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()
