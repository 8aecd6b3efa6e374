//! The conversations `memlayer eval planted` plays: the 60-turn conversation with four
//! planted facts and three questions about them, the 20 cases of the depth suite (four fact
//! types, each planted 5 to 60 turns before the question that needs it), and the
//! cross-session case. Each fact is written the way a person would say it, not the way the
//! extractor expects it, so some are caught by entity memory and some only by recall.
//!
//! The everyday exchanges around the facts come from `filler.txt`. Whoever states a fact, the
//! other side answers it, as in a real conversation; some facts are stated by the assistant
//! (a booking it made, an appointment it found), which entity memory never reads.

use std::sync::LazyLock;

use serde::Serialize;

/// One user message and the assistant's answer.
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    pub(crate) user: String,
    pub(crate) assistant: String,
}

impl Exchange {
    fn new(user: &str, assistant: &str) -> Self {
        Self {
            user: user.to_owned(),
            assistant: assistant.to_owned(),
        }
    }
}

/// A question whose answer needs a planted fact, and how to tell the context holds it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Probe {
    /// What the fact is, for people reading the report.
    pub(crate) fact: &'static str,
    pub(crate) query: &'static str,
    /// The value the context must contain (compared ignoring case).
    pub(crate) expected: &'static str,
    /// For a correction, the superseded value, which must not stand uncorrected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stale: Option<&'static str>,
}

/// The everyday exchanges, in conversation order.
pub(crate) static FILLER: LazyLock<Vec<Exchange>> =
    LazyLock::new(|| parse_filler(include_str!("filler.txt")));

fn parse_filler(text: &str) -> Vec<Exchange> {
    let mut exchanges = Vec::new();
    let mut question: Option<&str> = None;
    for line in text.lines() {
        if let Some(user) = line.strip_prefix("Q: ") {
            question = Some(user);
        } else if let Some(answer) = line.strip_prefix("A: ") {
            let user = question
                .take()
                .expect("filler.txt: an answer without a question");
            exchanges.push(Exchange::new(user, answer));
        }
    }
    exchanges
}

/// The filler exchange for a 1-based turn.
fn filler(turn: usize) -> Exchange {
    FILLER[turn - 1].clone()
}

// ---------------------------------------------------------------------------------------
// The 60-turn conversation.

/// Turns of the 60-turn conversation; the last one is where token costs are compared.
pub(crate) const CONVERSATION_TURNS: usize = 60;

/// The 60-turn conversation: its exchanges, the turns where facts are planted, and the
/// questions with the turns they are asked at.
pub(crate) struct Conversation {
    pub(crate) turns: Vec<Exchange>,
    pub(crate) plants: Vec<(usize, &'static str)>,
    pub(crate) probes: Vec<(usize, Probe)>,
}

pub(crate) fn conversation() -> Conversation {
    let mut turns: Vec<Exchange> = (1..=CONVERSATION_TURNS).map(filler).collect();
    let mut set = |turn: usize, user: &str, assistant: &str| {
        turns[turn - 1] = Exchange::new(user, assistant);
    };
    set(
        2,
        "Before we go on, let me set up my profile: my name is Marta Lindqvist.",
        "Nice to meet you, Marta. I have saved Marta Lindqvist as the name on your profile; \
         tell me if you want a different form of it used in letters or invoices.",
    );
    set(
        5,
        "For the billing questions later: my account number is 4471-2208-XK.",
        "Thanks, I have noted account 4471-2208-XK. I will use it whenever we look at invoices \
         or payments, so you will not need to dig it out again.",
    );
    set(
        15,
        "One more thing for the account: please contact me via WhatsApp, not by phone, I'm in \
         meetings most of the day.",
        "Understood: WhatsApp messages only, no phone calls. I have set that as your contact \
         preference.",
    );
    set(
        25,
        "Actually, my name is Marit Lindqvist, not Marta; the sign-up form autocorrected it.",
        "Sorry about that, Marit. I have corrected your profile to Marit Lindqvist and will use \
         that name from now on.",
    );
    let probes = vec![
        (
            55,
            Probe {
                fact: "name (corrected at turn 25)",
                query: "Which name do you have on file for me? The letter to the bank must match it.",
                expected: "Marit Lindqvist",
                stale: Some("Marta"),
            },
        ),
        (
            57,
            Probe {
                fact: "account number",
                query: "The transfer form asks for my account number. What is it again?",
                expected: "4471-2208-XK",
                stale: None,
            },
        ),
        (
            59,
            Probe {
                fact: "contact preference",
                query: "If the refund comes through while I'm away, how will you let me know?",
                expected: "WhatsApp",
                stale: None,
            },
        ),
    ];
    // The answers the conversation continues with: the later questions see them in history.
    let answers = [
        "You are on file as Marit Lindqvist; you corrected it from Marta earlier, so the letter \
         should say Marit Lindqvist.",
        "Your account number is 4471-2208-XK.",
        "I will send you a WhatsApp message as soon as the refund is confirmed, as you asked.",
    ];
    for ((turn, probe), answer) in probes.iter().zip(answers) {
        turns[turn - 1] = Exchange::new(probe.query, answer);
    }
    Conversation {
        turns,
        plants: vec![
            (2, "name"),
            (5, "account number"),
            (15, "contact preference"),
            (25, "name correction"),
        ],
        probes,
    }
}

// ---------------------------------------------------------------------------------------
// The depth suite.

/// How many turns before the question each fact of the suite is planted.
pub(crate) const DEPTHS: [usize; 5] = [5, 15, 30, 45, 60];
/// The turn every suite question is asked at: after 70 turns, so the deepest fact (60 turns
/// back) still has ten turns of conversation before it.
pub(crate) const SUITE_QUERY_TURN: usize = 71;

/// The four kinds of fact the suite plants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FactKind {
    /// An id, reference or serial number that must come back exactly.
    Identifier,
    /// How the user likes things done.
    Preference,
    /// A date: a deadline, an expiry, an appointment.
    Temporal,
    /// A value stated once and corrected later; the corrected one must win.
    Correction,
}

pub(crate) const FACT_KINDS: [FactKind; 4] = [
    FactKind::Identifier,
    FactKind::Preference,
    FactKind::Temporal,
    FactKind::Correction,
];

/// Who states a planted fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Source {
    User,
    Assistant,
}

/// One suite case: the 70 turns before the question, and the question.
pub(crate) struct Case {
    pub(crate) kind: FactKind,
    pub(crate) depth: usize,
    pub(crate) source: Source,
    /// Turn (1-based) of the exchange stating the fact (for a correction: the correction).
    pub(crate) plant_turn: usize,
    pub(crate) turns: Vec<Exchange>,
    pub(crate) probe: Probe,
}

/// How a variant plants its fact.
struct Variant {
    source: Source,
    statement: (&'static str, &'static str),
    /// For corrections: the exchange at turn 1 stating the value later corrected.
    original: Option<(&'static str, &'static str)>,
    probe: Probe,
}

pub(crate) fn suite() -> Vec<Case> {
    let mut cases = Vec::with_capacity(FACT_KINDS.len() * DEPTHS.len());
    for kind in FACT_KINDS {
        for (depth, variant) in DEPTHS.into_iter().zip(variants(kind)) {
            let plant_turn = SUITE_QUERY_TURN - depth;
            let mut turns: Vec<Exchange> = (1..SUITE_QUERY_TURN).map(filler).collect();
            let (user, assistant) = variant.statement;
            turns[plant_turn - 1] = Exchange::new(user, assistant);
            if let Some((user, assistant)) = variant.original {
                turns[0] = Exchange::new(user, assistant);
            }
            cases.push(Case {
                kind,
                depth,
                source: variant.source,
                plant_turn,
                turns,
                probe: variant.probe,
            });
        }
    }
    cases
}

/// Five variants of a kind, one per depth in [`DEPTHS`] order. They differ in wording and
/// in who states the fact so the suite does not measure one phrasing five times.
fn variants(kind: FactKind) -> [Variant; 5] {
    let user = |statement, probe| Variant {
        source: Source::User,
        statement,
        original: None,
        probe,
    };
    let assistant = |statement, probe| Variant {
        source: Source::Assistant,
        statement,
        original: None,
        probe,
    };
    let corrected = |original, statement, probe| Variant {
        source: Source::User,
        statement,
        original: Some(original),
        probe,
    };
    let probe = |fact, query, expected| Probe {
        fact,
        query,
        expected,
        stale: None,
    };
    let correction = |fact, query, expected, stale| Probe {
        fact,
        query,
        expected,
        stale: Some(stale),
    };
    match kind {
        FactKind::Identifier => [
            user(
                (
                    "For the warranty claim on the blender: my order number is ORD-58213-QT, it \
                     arrived with a cracked jug.",
                    "Thanks. With order ORD-58213-QT and a photo of the cracked jug, the retailer \
                     should replace it under warranty. Mention that the crack was there on \
                     arrival rather than caused by use.",
                ),
                probe(
                    "order number",
                    "Which order number do I need to put on the warranty claim form?",
                    "ORD-58213-QT",
                ),
            ),
            user(
                (
                    "The broadband company finally opened a support ticket for the outages, it's \
                     INC-40917.",
                    "Good, a ticket makes escalation much easier. Log each outage with its time \
                     and length against it, and if the problem continues past their promised \
                     fix, ask to have it escalated to a network engineer.",
                ),
                probe(
                    "support ticket",
                    "What was the reference of the support ticket for the broadband outages?",
                    "INC-40917",
                ),
            ),
            assistant(
                (
                    "Can you book the hotel in Porto for the conference, the one near the river?",
                    "Done: I booked two nights at the riverside hotel in Porto. Your booking \
                     reference is QX7H2P; you will need it at check-in and to change the dates.",
                ),
                probe(
                    "booking reference (from the assistant)",
                    "What's the booking reference for the Porto hotel?",
                    "QX7H2P",
                ),
            ),
            user(
                (
                    "My policy number is PL-2231-884 with Northwind Insurance, for when we sort \
                     out the water damage.",
                    "Noted. When you contact the insurer about the water damage, have the policy \
                     number ready with photos of the ceiling, the date you first noticed the leak \
                     and any plumber's report.",
                ),
                probe(
                    "insurance policy number",
                    "Which insurance policy number should I give the loss adjuster?",
                    "PL-2231-884",
                ),
            ),
            user(
                (
                    "The laptop that keeps overheating has the serial number 5CG8341XYZ on the \
                     sticker underneath.",
                    "That serial number lets the manufacturer check whether the laptop is still \
                     under warranty. Meanwhile keep the vents clear, use it on a hard surface, \
                     and check whether a background process keeps the processor busy.",
                ),
                probe(
                    "laptop serial number",
                    "What's the serial number of my overheating laptop? The repair shop is asking.",
                    "5CG8341XYZ",
                ),
            ),
        ],
        FactKind::Preference => [
            user(
                (
                    "When you give me recipes, I prefer metric units, grams and millilitres \
                     rather than cups.",
                    "Understood, grams and millilitres from now on. Weighing is more accurate \
                     anyway, especially for flour, which varies a lot by the cup.",
                ),
                probe(
                    "units for recipes",
                    "Could you scale the pancake recipe up for six people, in the units I like?",
                    "metric units",
                ),
            ),
            user(
                (
                    "If the parcel is delayed, please contact me via WhatsApp, I never pick up \
                     unknown numbers.",
                    "Noted: WhatsApp for any delivery updates, and no calls.",
                ),
                probe(
                    "contact preference",
                    "How should you get hold of me if there's news about the parcel?",
                    "WhatsApp",
                ),
            ),
            user(
                (
                    "I'm vegetarian, so please leave meat and fish out of any meal plans you make \
                     for me.",
                    "Of course. I will build meal plans around beans, lentils, eggs, dairy, tofu \
                     and whole grains, with a good protein source every day.",
                ),
                probe(
                    "diet",
                    "Plan three dinners for next week that fit my diet.",
                    "vegetarian",
                ),
            ),
            user(
                (
                    "I'd like the weekly project updates as bullet points rather than long \
                     paragraphs, I read them on my phone.",
                    "Got it: short bullet points, one line each, the most important item first.",
                ),
                probe(
                    "format of updates",
                    "Send me this week's project update in my usual format.",
                    "bullet points",
                ),
            ),
            user(
                (
                    "I prefer window seats on long flights, I like to lean against the wall and \
                     sleep.",
                    "Noted, a window seat whenever I book a long flight for you, ideally away \
                     from the galley so it stays quiet.",
                ),
                probe(
                    "seat preference",
                    "Book me on the Lisbon flight; which seat should I ask for?",
                    "window seat",
                ),
            ),
        ],
        FactKind::Temporal => [
            user(
                (
                    "Note for later: the grant report is due on 14 March 2027.",
                    "Noted. I would plan a full draft about three weeks before it is due, so your \
                     co-applicants can comment and the finance office can check the figures.",
                ),
                probe(
                    "grant report deadline",
                    "When do I have to hand in the grant report?",
                    "14 March 2027",
                ),
            ),
            user(
                (
                    "My passport expires on 18 November 2026, which might matter for the trip \
                     abroad.",
                    "It might: many countries require six months of validity beyond your stay, \
                     and airlines check it at the gate. Renewing early is wise, since processing \
                     can take several weeks.",
                ),
                probe(
                    "passport expiry",
                    "When does my passport expire? I'm filling in the visa form.",
                    "18 November 2026",
                ),
            ),
            user(
                (
                    "The landlord needs the signed lease back by 30 June, otherwise the flat goes \
                     to the next applicant.",
                    "Then read it carefully this week: the deposit terms, the notice period, who \
                     pays for repairs, and whether subletting is allowed. Ask about anything \
                     unclear in writing before you sign.",
                ),
                probe(
                    "lease deadline",
                    "What's the last day to return the signed lease to the landlord?",
                    "30 June",
                ),
            ),
            user(
                (
                    "Reminder for me: the tax return has to be filed no later than 31 January.",
                    "Noted. Gather your income statements, interest certificates and receipts \
                     early; filing a few weeks ahead also leaves time to pay what is owed without \
                     a penalty.",
                ),
                probe(
                    "tax return deadline",
                    "What's the cutoff for filing my tax return?",
                    "31 January",
                ),
            ),
            assistant(
                (
                    "Could you find me the earliest appointment at the citizens' office to renew \
                     my residence permit?",
                    "I found one: the earliest free appointment at the citizens' office is on \
                     9 October at 10:30, and I have reserved it in your name. Bring your current \
                     permit, a passport photo and proof of address.",
                ),
                probe(
                    "appointment date (from the assistant)",
                    "What date is my residence permit appointment?",
                    "9 October",
                ),
            ),
        ],
        FactKind::Correction => [
            corrected(
                (
                    "The client meeting about the redesign is on Tuesday, so I'll need the slides \
                     ready before then.",
                    "Then let us aim to finish the slides a day early, which leaves time for a \
                     rehearsal and for fixing anything that looks wrong on the projector.",
                ),
                (
                    "I got that wrong earlier: the client meeting is on Thursday, not Tuesday.",
                    "Thanks for the correction, Thursday it is. That gives us two extra days for \
                     the slides.",
                ),
                correction(
                    "meeting day",
                    "Which day is the client meeting again?",
                    "Thursday",
                    "Tuesday",
                ),
            ),
            corrected(
                (
                    "Hi, my name is Jon Baker, and I'm planning a kitchen renovation.",
                    "Nice to meet you, Jon. A kitchen renovation is a big project; let us start \
                     with the layout, the budget and which appliances you want to keep.",
                ),
                (
                    "Sorry, I misspelled my own name earlier: my name is John Baker, not Jon \
                     Baker.",
                    "No problem, John, I have corrected it.",
                ),
                correction(
                    "name",
                    "What name should go on the quote for the kitchen fitter?",
                    "John Baker",
                    "Jon Baker",
                ),
            ),
            corrected(
                (
                    "Please ship the new desk to my flat in Leeds when it's ready.",
                    "Will do: once the desk is ready I will arrange delivery to your flat in \
                     Leeds and send you the delivery window.",
                ),
                (
                    "Change of plan: ship the desk to my sister's place in York instead of Leeds, \
                     I'm moving in with her for a while.",
                    "Understood, the desk goes to your sister's place in York. I have updated the \
                     delivery address.",
                ),
                correction(
                    "delivery city",
                    "Where is the desk being delivered?",
                    "York",
                    "Leeds",
                ),
            ),
            corrected(
                (
                    "My budget is 4,000 euros for everything, including materials.",
                    "That is workable for a refresh. Materials will take most of it, so we should \
                     decide early which parts matter most to you and where a cheaper finish will \
                     do.",
                ),
                (
                    "Actually, my budget is 5,500 euros, not 4,000 euros, my partner is chipping \
                     in.",
                    "Good news. With 5,500 euros we can include the new worktop and still keep a \
                     reserve for surprises.",
                ),
                correction(
                    "budget",
                    "How much can I spend on the renovation in total?",
                    "5,500 euros",
                    "4,000 euros",
                ),
            ),
            corrected(
                (
                    "My phone number is 0161 496 0732, in case the plumber needs to reach me.",
                    "Noted, I will pass your number on to the plumber when the visit is booked.",
                ),
                (
                    "Correction: my phone number is 0161 496 0823, not 0161 496 0732, I swapped \
                     the last digits.",
                    "Thanks, I have updated your number and will give the plumber the right one.",
                ),
                correction(
                    "phone number",
                    "Which phone number will you give the plumber?",
                    "0161 496 0823",
                    "0161 496 0732",
                ),
            ),
        ],
    }
}

// ---------------------------------------------------------------------------------------
// The cross-session case.

/// A preference stated in one session of a user and needed in the next one.
pub(crate) struct CrossSession {
    /// The first session; the fact is stated at `plant_turn`.
    pub(crate) first: Vec<Exchange>,
    pub(crate) plant_turn: usize,
    /// The second session before its question.
    pub(crate) second: Vec<Exchange>,
    pub(crate) probe: Probe,
}

/// Filler for the two sessions comes after the suite's 70 turns, so none of it repeats.
pub(crate) fn cross_session() -> CrossSession {
    let plant = Exchange::new(
        "About the insurance claim: please contact me on Telegram when there's news, I don't \
         check anything else.",
        "Will do. I will send any updates about the claim on Telegram.",
    );
    CrossSession {
        first: vec![filler(71), filler(72), plant, filler(73), filler(74)],
        plant_turn: 3,
        second: (75..=77).map(filler).collect(),
        probe: Probe {
            fact: "contact preference (stated in the previous session)",
            query: "When the insurance claim is settled, how will you let me know?",
            expected: "Telegram",
            stale: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use memlayer_store::{Message, Role, Timestamp};

    use super::*;

    fn all_probes() -> Vec<Probe> {
        let mut probes: Vec<Probe> = conversation().probes.into_iter().map(|(_, p)| p).collect();
        probes.extend(suite().into_iter().map(|case| case.probe));
        probes.push(cross_session().probe);
        probes
    }

    #[test]
    fn filler_is_long_enough_and_realistically_sized() {
        // The suite needs 70 turns and the cross-session case 6 more.
        assert_eq!(FILLER.len(), 77);
        for exchange in FILLER.iter() {
            let words = exchange.assistant.split_whitespace().count();
            assert!(
                (40..=80).contains(&words),
                "{words} words: {}",
                exchange.assistant
            );
        }
    }

    #[test]
    fn filler_never_mentions_a_planted_value() {
        // A value that also appeared in filler would count as found wherever that filler is.
        for probe in all_probes() {
            let values = std::iter::once(probe.expected).chain(probe.stale);
            for value in values {
                let value = value.to_lowercase();
                for exchange in FILLER.iter() {
                    assert!(
                        !exchange.user.to_lowercase().contains(&value)
                            && !exchange.assistant.to_lowercase().contains(&value),
                        "filler mentions {value:?}: {exchange:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn filler_questions_state_no_fact_a_probe_asks_about() {
        // Filler may state incidental facts, as people do, but none under a key a probe
        // needs: a filler "deadline" would overwrite the planted one in entity memory.
        let keys = [
            "name",
            "account number",
            "order number",
            "contact preference",
            "deadline",
            "phone",
            "budget",
        ];
        for (index, exchange) in FILLER.iter().enumerate() {
            let message = Message {
                index: index as u64,
                role: Role::User,
                content: exchange.user.clone(),
                timestamp: Timestamp::from_micros(0),
                token_count: 0,
                metadata: Default::default(),
            };
            for fact in memlayer_memory::extract(&message) {
                assert!(!keys.contains(&fact.key.as_str()), "{fact:?}");
            }
        }
    }

    #[test]
    fn every_query_is_asked_where_it_should_be() {
        let conversation = conversation();
        assert_eq!(conversation.turns.len(), CONVERSATION_TURNS);
        for (turn, probe) in &conversation.probes {
            assert_eq!(conversation.turns[turn - 1].user, probe.query);
            assert!(!probe.query.contains(probe.expected));
        }
        let cases = suite();
        assert_eq!(cases.len(), 20);
        for case in &cases {
            assert_eq!(case.turns.len(), SUITE_QUERY_TURN - 1);
            assert_eq!(case.plant_turn + case.depth, SUITE_QUERY_TURN);
            let planted = &case.turns[case.plant_turn - 1];
            let stating = match case.source {
                Source::User => &planted.user,
                Source::Assistant => &planted.assistant,
            };
            assert!(stating.contains(case.probe.expected), "{stating}");
            if let Some(stale) = case.probe.stale {
                assert!(case.turns[0].user.contains(stale));
            }
        }
        let cross = cross_session();
        assert_eq!(cross.first.len(), 5);
        assert!(
            cross.first[cross.plant_turn - 1]
                .user
                .contains(cross.probe.expected)
        );
    }
}
