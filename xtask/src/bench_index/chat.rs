//! The index benchmark's texts: a corpus of chat messages and, separately, the questions a
//! user would later ask about them, both generated from a fixed seed.
//!
//! Messages are built like `bench-embed`'s (5 to 40 words, an opener, clauses joined by
//! connectors, cut at a target length) but from sixteen topics with wider vocabularies, so
//! that 100,000 of them spread over many neighbourhoods instead of piling up on a few
//! templates that differ by a number: a graph over near-duplicates would measure the
//! generator, not HNSW. Duplicates are not removed, as in real chat ("thanks!"), and the
//! report counts them. Questions come from each topic's question templates, which no
//! message uses, so a query is a paraphrase-like probe, never a copy of a stored text.
//!
//! The corpus for `n` messages is the first `n` of one stream, so smaller sizes are
//! prefixes of larger ones.

use crate::bench_embed::messages::{
    CLOSERS, CONNECTORS, DAYS, MAX_WORDS, MIN_WORDS, OPENERS, SplitMix64,
};

/// Seeds of the two streams; any change to the texts changes the embedding cache's name, so
/// these need no version of their own.
const MESSAGE_SEED: u64 = 0x6d6c_6978_2d63_6f72;
const QUESTION_SEED: u64 = 0x6d6c_6978_2d71_7279;

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

const NAMES: [&str; 24] = [
    "Alice", "Bob", "Priya", "Tomasz", "Mei", "Carlos", "Fatima", "Jonas", "Aisha", "Diego",
    "Hannah", "Kenji", "Lena", "Marcus", "Nadia", "Oliver", "Rosa", "Samir", "Yuki", "Zoe",
    "Grace", "Ivan", "Leila", "Pedro",
];
const CITIES: [&str; 20] = [
    "Lisbon",
    "Berlin",
    "Osaka",
    "Toronto",
    "Nairobi",
    "Lyon",
    "Austin",
    "Krakow",
    "Seoul",
    "Melbourne",
    "Dublin",
    "Mumbai",
    "Oslo",
    "Bogota",
    "Cairo",
    "Vancouver",
    "Porto",
    "Hanoi",
    "Munich",
    "Denver",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const COLOURS: [&str; 10] = [
    "blue", "green", "red", "yellow", "black", "orange", "white", "purple", "navy", "pink",
];
const TIMES: [&str; 8] = [
    "9am",
    "noon",
    "half past two",
    "6pm",
    "8 in the evening",
    "7:30",
    "quarter to eleven",
    "lunchtime",
];
const PROJECTS: [&str; 14] = [
    "marketing offsite",
    "billing migration",
    "office move",
    "hiring plan",
    "mobile release",
    "security audit",
    "data warehouse",
    "partner portal",
    "support rota",
    "brand refresh",
    "cloud migration",
    "onboarding flow",
    "sales kickoff",
    "search revamp",
];
const PRODUCTS: [&str; 14] = [
    "headphones",
    "standing desk",
    "coffee machine",
    "backpack",
    "monitor",
    "keyboard",
    "phone case",
    "blender",
    "jacket",
    "running shoes",
    "router",
    "kettle",
    "office chair",
    "webcam",
];
const FOODS: [&str; 10] = [
    "gluten",
    "dairy",
    "sugar",
    "red meat",
    "shellfish",
    "spicy food",
    "coffee",
    "pasta",
    "sushi",
    "curry",
];
const PETS: [&str; 6] = ["Biscuit", "Luna", "Max", "Pepper", "Milo", "Olive"];
const LANGUAGES: [&str; 8] = [
    "Spanish",
    "Japanese",
    "German",
    "Portuguese",
    "Korean",
    "Arabic",
    "Italian",
    "Polish",
];
const SPORTS: [&str; 7] = [
    "tennis",
    "squash",
    "football",
    "badminton",
    "volleyball",
    "chess",
    "padel",
];
const CURRENCIES: [&str; 3] = ["euros", "dollars", "pounds"];

/// The first `count` messages of the corpus stream.
pub(crate) fn messages(count: usize) -> Vec<String> {
    let mut random = SplitMix64(MESSAGE_SEED);
    (0..count).map(|_| message(&mut random)).collect()
}

/// The first `count` questions of the query stream.
pub(crate) fn questions(count: usize) -> Vec<String> {
    let mut random = SplitMix64(QUESTION_SEED);
    (0..count).map(|_| question(&mut random)).collect()
}

fn message(random: &mut SplitMix64) -> String {
    let target = MIN_WORDS + random.below(MAX_WORDS - MIN_WORDS + 1);
    let mut topic = &TOPICS[random.below(TOPICS.len())];
    let mut words: Vec<String> = Vec::new();
    if random.below(3) == 0 {
        push(&mut words, random.pick(&OPENERS));
    }
    let mut last = None;
    loop {
        let statement = next_statement(topic, last, random);
        push(&mut words, &fill(statement, random));
        last = Some(statement);
        let room = target.saturating_sub(words.len());
        if room == 0 {
            break;
        }
        if room <= 3 {
            push(&mut words, random.pick(&CLOSERS));
            break;
        }
        push(&mut words, random.pick(&CONNECTORS));
        // Chat drifts: now and then the next clause is about something else.
        if random.below(4) == 0 {
            topic = &TOPICS[random.below(TOPICS.len())];
        }
    }
    words.truncate(target);
    capitalise(&words.join(" "))
}

/// A statement of `topic`, never `last` again: "we are hiring 4 engineers and we are hiring
/// 7 engineers" reads like a generator, not a person.
fn next_statement(
    topic: &Topic,
    last: Option<&'static str>,
    random: &mut SplitMix64,
) -> &'static str {
    let statements = topic.statements;
    match last.and_then(|last| statements.iter().position(|&s| s == last)) {
        Some(previous) => {
            statements[(previous + 1 + random.below(statements.len() - 1)) % statements.len()]
        }
        None => random.pick(statements),
    }
}

fn question(random: &mut SplitMix64) -> String {
    let topic = &TOPICS[random.below(TOPICS.len())];
    let opener = random.pick(&QUESTION_OPENERS);
    let body = fill(random.pick(topic.questions), random);
    let text = if opener.is_empty() {
        body
    } else {
        format!("{opener} {body}")
    };
    capitalise(&format!("{text}?"))
}

fn push(words: &mut Vec<String>, text: &str) {
    words.extend(text.split(' ').map(str::to_owned));
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|initial| initial.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// Replaces every slot of `template`; each slot's value is drawn whether or not the
/// template uses it, so the stream's position does not depend on the template.
fn fill(template: &str, random: &mut SplitMix64) -> String {
    let number = (1000 + random.below(9000)).to_string();
    let count = (2 + random.below(9)).to_string();
    let amount = format!(
        "{} {}",
        10 * (2 + random.below(199)),
        random.pick(&CURRENCIES)
    );
    let slots: [(&str, &str); 15] = [
        ("{number}", &number),
        ("{count}", &count),
        ("{amount}", &amount),
        ("{name}", random.pick(&NAMES)),
        ("{city}", random.pick(&CITIES)),
        ("{day}", random.pick(&DAYS)),
        ("{month}", random.pick(&MONTHS)),
        ("{colour}", random.pick(&COLOURS)),
        ("{time}", random.pick(&TIMES)),
        ("{project}", random.pick(&PROJECTS)),
        ("{product}", random.pick(&PRODUCTS)),
        ("{food}", random.pick(&FOODS)),
        ("{pet}", random.pick(&PETS)),
        ("{language}", random.pick(&LANGUAGES)),
        ("{sport}", random.pick(&SPORTS)),
    ];
    let mut text = template.to_owned();
    for (slot, value) in slots {
        text = text.replace(slot, value);
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

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
