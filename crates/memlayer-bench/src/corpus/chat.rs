//! Chat messages. Two streams share the message shape (5 to 40 words, an opener, clauses
//! joined by connectors, cut at a target length; see `compose`):
//!
//! - `short_messages`: distinct messages from thirty everyday clauses over small word lists,
//!   for the embedding benchmark, where only the mix of lengths matters.
//! - `messages` and `questions`: clauses from sixteen topics with wider vocabularies, so that
//!   100,000 messages spread over many neighbourhoods instead of piling up on a few templates
//!   that differ by a number (a graph over near-duplicates would measure the generator, not
//!   HNSW). Duplicates are not removed, as in real chat ("thanks!"), and the index report
//!   counts them. Questions come from each topic's question templates, which no message uses,
//!   so a query is a paraphrase-like probe, never a copy of a stored text. The stream for `n`
//!   messages is the first `n` of one stream, so smaller sizes are prefixes of larger ones;
//!   `Stream::numbered` gives independent streams of the same kind for the benchmarks that
//!   fill a store.

use std::collections::HashSet;

use super::{
    CITIES, COLOURS, Clauses, DAYS, FOODS, LANGUAGES, MONTHS, NAMES, PETS, PRODUCTS, PROJECTS,
    SPORTS, Slot, SplitMix64, TIMES, capitalise, compose, fill, first, target_words,
};

/// Seeds of the streams; any change to the texts changes the index benchmark's embedding
/// cache's name, so these need no version of their own.
const SHORT_SEED: u64 = 0x6d65_6d6c_6179_6572;
const MESSAGE_SEED: u64 = 0x6d6c_6978_2d63_6f72;
const QUESTION_SEED: u64 = 0x6d6c_6978_2d71_7279;

/// The short messages' clauses: every one has at least `MIN_WORDS` words, so a message of
/// one clause is long enough.
const CLAUSES: [&str; 30] = [
    "can you check whether order {number} has shipped yet",
    "my flight to {city} got moved to {day}",
    "I still cannot log in to the dashboard",
    "the invoice for {month} looks wrong to me",
    "remind me to call {name} about the contract",
    "we agreed to push the launch back by two weeks",
    "the build on main has been failing since {day}",
    "I prefer a window seat if there is one left",
    "please summarise what {name} said in the meeting",
    "my favourite colour is {colour}",
    "the printer on the third floor is jammed again",
    "could you book a table for {count} people at {time}",
    "I am allergic to peanuts so keep that in mind",
    "what did we decide about the {topic}",
    "the client wants the report before {day}",
    "I moved to {city} last {month}",
    "my daughter has her birthday party on {day}",
    "send the slides to {name} when they are ready",
    "the wifi keeps dropping during video calls",
    "let us revisit the budget for the {topic}",
    "I ordered the {colour} one but got a grey one",
    "the refund for ticket {number} never arrived",
    "can we move the standup to {time} tomorrow",
    "{name} is out sick so I am covering her shifts",
    "the new pricing page confuses a lot of customers",
    "I need the password reset link sent again",
    "our hotel in {city} cancelled the booking without notice",
    "the dentist appointment is on {day} at {time}",
    "please add {name} to the {topic} channel",
    "the delivery address should be the office not my flat",
];

/// Every other month, for the short messages.
const EVERY_OTHER_MONTH: [&str; 6] = [
    MONTHS[0], MONTHS[2], MONTHS[4], MONTHS[6], MONTHS[8], MONTHS[10],
];

/// The short messages' slots, in the order they are drawn.
const SHORT_SLOTS: [Slot; 9] = [
    Slot::Number,
    Slot::Count,
    Slot::Word("{city}", first(&CITIES, 6)),
    Slot::Word("{day}", &DAYS),
    Slot::Word("{month}", &EVERY_OTHER_MONTH),
    Slot::Word("{name}", first(&NAMES, 8)),
    Slot::Word("{colour}", first(&COLOURS, 6)),
    Slot::Word("{topic}", first(&PROJECTS, 6)),
    Slot::Word("{time}", first(&TIMES, 5)),
];

/// The topical messages' and questions' slots, in the order they are drawn.
const SLOTS: [Slot; 15] = [
    Slot::Number,
    Slot::Count,
    Slot::Amount,
    Slot::Word("{name}", &NAMES),
    Slot::Word("{city}", &CITIES),
    Slot::Word("{day}", &DAYS),
    Slot::Word("{month}", &MONTHS),
    Slot::Word("{colour}", &COLOURS),
    Slot::Word("{time}", &TIMES),
    Slot::Word("{project}", &PROJECTS),
    Slot::Word("{product}", &PRODUCTS),
    Slot::Word("{food}", &FOODS),
    Slot::Word("{pet}", &PETS),
    Slot::Word("{language}", &LANGUAGES),
    Slot::Word("{sport}", &SPORTS),
];

/// One subject of conversation: what people say about it, and what they later ask.
struct Topic {
    statements: &'static [&'static str],
    questions: &'static [&'static str],
}

const TOPICS: [Topic; 16] = [
    Topic {
        statements: &[
            "my flight to {city} got moved to {day}",
            "I booked a hotel in {city} for {count} nights in {month}",
            "the train to {city} leaves at {time} on {day}",
            "our hotel in {city} cancelled the booking without notice",
            "I prefer a window seat if there is one left",
            "my passport expires in {month} so I need to renew it",
            "the rental car pickup in {city} is at {time}",
            "{name} is joining me on the trip to {city}",
        ],
        questions: &[
            "when is my flight to {city}",
            "which hotel did I book in {city}",
            "what time does my train leave on {day}",
            "who is coming with me to {city}",
            "do I need a new passport before the trip",
            "is the rental car in {city} booked",
            "when am I travelling in {month}",
        ],
    },
    Topic {
        statements: &[
            "can you check whether order {number} has shipped yet",
            "I ordered the {colour} {product} but got a grey one",
            "the refund for order {number} never arrived",
            "the {product} I bought in {month} stopped working",
            "the delivery address should be the office not my flat",
            "I want to return the {product} because it is too small",
            "the courier left parcel {number} with my neighbour",
        ],
        questions: &[
            "where is my order {number}",
            "did the refund for the {product} come through",
            "what colour {product} did I order",
            "which address should my deliveries go to",
            "what was wrong with the {product}",
            "has parcel {number} been delivered",
        ],
    },
    Topic {
        statements: &[
            "the invoice for {month} looks wrong to me",
            "we were charged {amount} twice for the same subscription",
            "please switch our plan to annual billing from {month}",
            "the card ending in {number} expired last {month}",
            "accounting needs all the receipts by {day}",
        ],
        questions: &[
            "how much were we charged in {month}",
            "which card is on file for the subscription",
            "when do the receipts need to be with accounting",
            "why does the {month} invoice look wrong",
        ],
    },
    Topic {
        statements: &[
            "the build on main has been failing since {day}",
            "the deploy to staging broke the login page",
            "ticket {number} is blocked on a database migration",
            "we should pin the dependency before the {project}",
            "the tests are flaky on the {product} integration",
            "{name} is reviewing the pull request for ticket {number}",
        ],
        questions: &[
            "why is the build failing",
            "who is reviewing ticket {number}",
            "what is blocking ticket {number}",
            "what broke after the deploy on {day}",
            "which tests are flaky on the {product} integration",
        ],
    },
    Topic {
        statements: &[
            "I still cannot log in to the dashboard",
            "I need the password reset link sent again",
            "the wifi keeps dropping during video calls",
            "the printer on the third floor is jammed again",
            "my laptop will not connect to the VPN since {day}",
        ],
        questions: &[
            "what was wrong with my login",
            "is the VPN working again",
            "which printer was broken",
            "what IT problem did I have on {day}",
        ],
    },
    Topic {
        statements: &[
            "can we move the standup to {time} tomorrow",
            "please summarise what {name} said in the meeting",
            "the client wants the report before {day}",
            "let us meet with {name} on {day} at {time}",
            "the quarterly review is set for {month}",
        ],
        questions: &[
            "when is the meeting with {name}",
            "what did {name} say in the meeting",
            "when is the report due",
            "what is on my calendar for {day}",
            "did we move the standup to {time}",
        ],
    },
    Topic {
        statements: &[
            "we agreed to push the {project} back by two weeks",
            "what did we decide about the {project}",
            "let us revisit the budget for the {project}",
            "{name} owns the {project} from now on",
            "the {project} needs {count} more people",
        ],
        questions: &[
            "who owns the {project}",
            "what did we agree about the {project} budget",
            "is the {project} delayed",
            "how many people does the {project} need",
        ],
    },
    Topic {
        statements: &[
            "my daughter has her birthday party on {day}",
            "remind me to call my mother on {day}",
            "my sister {name} is visiting from {city} in {month}",
            "we are celebrating our anniversary at {time} on {day}",
        ],
        questions: &[
            "when is my daughter's birthday party",
            "when is my sister visiting",
            "what are we doing for the anniversary",
            "who is visiting from {city}",
            "what is happening on {day}",
        ],
    },
    Topic {
        statements: &[
            "the dentist appointment is on {day} at {time}",
            "I am allergic to peanuts so keep that in mind",
            "the doctor told me to cut down on {food}",
            "I started physiotherapy for my knee in {month}",
            "I take my medication every morning at {time}",
        ],
        questions: &[
            "when is my dentist appointment",
            "what am I allergic to",
            "what did the doctor say about my diet",
            "when do I take my medication",
            "what did I say about {food}",
        ],
    },
    Topic {
        statements: &[
            "I do not eat {food} any more",
            "could you book a table for {count} people at {time}",
            "my favourite restaurant in {city} serves great {food}",
            "I am trying to cook {food} at home every {day}",
        ],
        questions: &[
            "what food do I avoid",
            "which restaurant did I like in {city}",
            "for how many people was the table booked",
            "where should we eat in {city}",
            "do I still eat {food}",
        ],
    },
    Topic {
        statements: &[
            "my favourite colour is {colour}",
            "I moved to {city} last {month}",
            "I work from home on {day}s",
            "I am learning {language} in the evenings",
            "my dog {pet} needs a walk at {time}",
        ],
        questions: &[
            "what is my favourite colour",
            "where do I live now",
            "which language am I learning",
            "what is my dog called",
            "when did I move to {city}",
            "which days do I work from home",
        ],
    },
    Topic {
        statements: &[
            "{name} is out sick so I am covering their shifts",
            "please add {name} to the {project} channel",
            "we are hiring {count} engineers for the {project}",
            "{name} starts on {day} and needs a laptop",
            "my holiday request for {month} is still pending",
        ],
        questions: &[
            "who is covering for {name}",
            "how many people are we hiring",
            "was my holiday in {month} approved",
            "when does {name} start",
            "who did I add to the {project} channel",
        ],
    },
    Topic {
        statements: &[
            "the boiler broke again and the plumber comes on {day}",
            "the landlord wants to raise the rent by {amount}",
            "the kitchen tap has been leaking since {month}",
            "we are painting the living room {colour}",
        ],
        questions: &[
            "when is the plumber coming",
            "how much is the rent going up",
            "what colour are we painting the living room",
            "what is leaking in the kitchen",
        ],
    },
    Topic {
        statements: &[
            "I transferred {amount} to {name} for the concert tickets",
            "my savings goal this year is {amount}",
            "the mortgage payment goes out every {day}",
        ],
        questions: &[
            "how much did I send {name}",
            "what is my savings goal",
            "when does the mortgage payment go out",
            "what were the concert tickets with {name} about",
        ],
    },
    Topic {
        statements: &[
            "the new pricing page confuses a lot of customers",
            "customers in {city} keep asking for a {colour} {product}",
            "support got {count} complaints about the {product} this week",
        ],
        questions: &[
            "what are customers complaining about",
            "what do customers in {city} want",
            "how many complaints did the {product} get",
        ],
    },
    Topic {
        statements: &[
            "I signed up for a {count} kilometre run in {month}",
            "{name} and I play {sport} every {day}",
            "I finished reading the book {name} recommended",
        ],
        questions: &[
            "when is my run",
            "what sport do I play with {name}",
            "which book did {name} recommend",
        ],
    },
];

/// How a question may open; the empty one leaves it bare.
const QUESTION_OPENERS: [&str; 9] = [
    "",
    "quick question:",
    "remind me,",
    "hey, so",
    "one thing:",
    "sorry, I forgot:",
    "before I forget,",
    "hmm,",
    "ok so",
];
/// `count` distinct short messages, the same on every call.
pub(crate) fn short_messages(count: usize) -> Vec<String> {
    let mut random = SplitMix64(SHORT_SEED);
    let mut seen = HashSet::with_capacity(count);
    let mut messages = Vec::with_capacity(count);
    while messages.len() < count {
        let target = target_words(&mut random);
        let message = compose(&mut random, target, &mut ShortClauses);
        if seen.insert(message.clone()) {
            messages.push(message);
        }
    }
    messages
}

struct ShortClauses;

impl Clauses for ShortClauses {
    fn next(&mut self, random: &mut SplitMix64) -> String {
        fill(random.pick(&CLAUSES), &SHORT_SLOTS, random)
    }
}

/// The first `count` messages of the corpus stream.
pub(crate) fn messages(count: usize) -> Vec<String> {
    Stream(SplitMix64(MESSAGE_SEED)).take(count).collect()
}

/// Topical messages without end; `messages` reads the first of these streams.
pub(crate) struct Stream(SplitMix64);

impl Stream {
    /// Stream number `stream`, independent of the others and of the one `messages` reads.
    pub(crate) fn numbered(stream: u64) -> Self {
        Self(SplitMix64::stream(MESSAGE_SEED, stream.wrapping_add(1)))
    }
}

impl Iterator for Stream {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let random = &mut self.0;
        let target = target_words(random);
        let mut clauses = Topical {
            topic: &TOPICS[random.below(TOPICS.len())],
            last: None,
        };
        Some(compose(random, target, &mut clauses))
    }
}

/// The first `count` questions of the query stream.
pub(crate) fn questions(count: usize) -> Vec<String> {
    let mut random = SplitMix64(QUESTION_SEED);
    (0..count).map(|_| question(&mut random)).collect()
}

/// Clauses from one topic at a time, never the same statement twice in a row: "we are
/// hiring 4 engineers and we are hiring 7 engineers" reads like a generator, not a person.
struct Topical {
    topic: &'static Topic,
    last: Option<&'static str>,
}

impl Clauses for Topical {
    fn next(&mut self, random: &mut SplitMix64) -> String {
        let statements = self.topic.statements;
        let previous = self
            .last
            .and_then(|last| statements.iter().position(|&s| s == last));
        let statement = match previous {
            Some(previous) => {
                statements[(previous + 1 + random.below(statements.len() - 1)) % statements.len()]
            }
            None => random.pick(statements),
        };
        self.last = Some(statement);
        fill(statement, &SLOTS, random)
    }

    /// Chat drifts: now and then the next clause is about something else.
    fn after_connector(&mut self, random: &mut SplitMix64) {
        if random.below(4) == 0 {
            self.topic = &TOPICS[random.below(TOPICS.len())];
        }
    }
}

fn question(random: &mut SplitMix64) -> String {
    let topic = &TOPICS[random.below(TOPICS.len())];
    let opener = random.pick(&QUESTION_OPENERS);
    let body = fill(random.pick(topic.questions), &SLOTS, random);
    let text = if opener.is_empty() {
        body
    } else {
        format!("{opener} {body}")
    };
    capitalise(&format!("{text}?"))
}

#[cfg(test)]
mod tests {
    use super::super::{MAX_WORDS, MIN_WORDS};
    use super::*;

    #[test]
    fn messages_are_distinct_deterministic_and_varied_in_length() {
        let first = short_messages(1000);
        assert_eq!(first, short_messages(1000));
        let distinct: HashSet<&String> = first.iter().collect();
        assert_eq!(distinct.len(), 1000);
        let lengths: Vec<usize> = first
            .iter()
            .map(|message| message.split_whitespace().count())
            .collect();
        assert!(
            lengths
                .iter()
                .all(|words| (MIN_WORDS..=MAX_WORDS).contains(words))
        );
        let short = lengths.iter().filter(|&&words| words <= 10).count();
        let long = lengths.iter().filter(|&&words| words >= 30).count();
        assert!(short > 100 && long > 100, "{short} short, {long} long");
    }

    #[test]
    fn streams_are_deterministic_prefixes() {
        let long = messages(2000);
        assert_eq!(messages(500), long[..500]);
        assert_eq!(questions(100), questions(200)[..100]);
    }

    #[test]
    fn messages_are_mostly_distinct_and_fill_every_slot() {
        let corpus = messages(20_000);
        let distinct: HashSet<&String> = corpus.iter().collect();
        assert!(distinct.len() > 19_000, "{} distinct", distinct.len());
        assert!(corpus.iter().all(|text| !text.contains('{')));
        assert!(
            corpus
                .iter()
                .all(|text| { (MIN_WORDS..=MAX_WORDS).contains(&text.split_whitespace().count()) })
        );
    }

    #[test]
    fn questions_are_not_corpus_messages() {
        let corpus: HashSet<String> = messages(20_000).into_iter().collect();
        let queries = questions(1000);
        assert!(queries.iter().all(|q| q.ends_with('?') && !q.contains('{')));
        assert!(queries.iter().all(|q| !corpus.contains(q)));
    }
}
