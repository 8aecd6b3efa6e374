//! Support conversations, for the context benchmark: support chats between one customer and a support
//! agent, generated from a fixed seed so every run stores exactly the same texts.
//!
//! A user message mixes a request (an order that has not arrived, a wrong invoice, a login
//! problem, a booking) with, every few turns, something the customer states about
//! themselves — a name, an email address, account, order and ticket numbers, a phone number,
//! a deadline, how to be contacted, likes and allergies — in the forms the rule-based fact
//! extractor (`memlayer_memory::extract`) reads. Values change over a long conversation
//! (new orders, a new phone number, corrections), so a 1,000-turn session ends with a fact
//! sheet carrying history, as a real one would. Assistant messages answer with the same
//! values. Lengths vary from a one-line thank-you to a paragraph.
//!
//! Questions for recall come from separate templates that no message uses, each carrying a
//! number, so there are enough distinct ones for every timed request to ask something new.

use std::collections::HashSet;

use super::{CITIES, DAYS, MONTHS, SplitMix64, capitalise, replace_slots};

/// One turn: what the customer wrote and what support answered.
pub(crate) struct Turn {
    pub(crate) user: String,
    pub(crate) assistant: String,
}

const FIRST_NAMES: [&str; 10] = [
    "Dana", "Tomasz", "Priya", "Mei", "Carlos", "Fatima", "Jonas", "Aisha", "Liam", "Noor",
];
const LAST_NAMES: [&str; 8] = [
    "Whitfield",
    "Kowalski",
    "Raman",
    "Tanaka",
    "Ortega",
    "Haddad",
    "Berg",
    "Okafor",
];
const PRODUCTS: [&str; 12] = [
    "standing desk",
    "noise-cancelling headphones",
    "espresso machine",
    "mechanical keyboard",
    "office chair",
    "4K monitor",
    "router",
    "air purifier",
    "robot vacuum",
    "smart thermostat",
    "laptop stand",
    "webcam",
];
/// The first six cities of the shared list, then Dublin and Austin: the order the stored
/// conversations were generated with.
const SUPPORT_CITIES: [&str; 8] = [
    CITIES[0], CITIES[1], CITIES[2], CITIES[3], CITIES[4], CITIES[5], CITIES[10], CITIES[6],
];
const PLANS: [&str; 4] = ["Basic", "Plus", "Pro", "Business"];
const CHANNELS: [&str; 4] = ["email", "phone", "sms", "whatsapp"];
const LIKES: [&str; 8] = [
    "window seats",
    "morning deliveries",
    "paper invoices",
    "dark roast coffee",
    "quiet rooms",
    "aisle seats",
    "eco packaging",
    "weekend slots",
];
const ALLERGIES: [&str; 4] = ["peanuts", "shellfish", "latex", "gluten"];
const CARRIERS: [&str; 4] = ["DHL", "UPS", "FedEx", "the local courier"];
const COLOURS: [&str; 6] = [
    "matte black",
    "white",
    "walnut",
    "grey",
    "sage green",
    "navy",
];

/// What the customer says, one clause at a time. Slots are filled by `fill`.
const REQUESTS: [&str; 28] = [
    "my {product} from order ORD-{order} still has not arrived",
    "the tracking page for ORD-{order} has said in transit since {day}",
    "I was charged {amount} euros twice on my last invoice",
    "can you check why invoice INV-{invoice} shows the {plan} plan when I downgraded",
    "I cannot log in since the password reset on {day}",
    "the {product} I received is {colour} but I ordered the other colour",
    "please cancel the return label you sent for ORD-{order}",
    "the {product} makes a clicking noise after about ten minutes",
    "I need a copy of the receipt for ticket TCK-{ticket} for my expenses",
    "could you move the delivery to {day} between {hour} and {later}",
    "the courier left the parcel with a neighbour in {city} without asking",
    "I want to upgrade to the {plan} plan if the discount still applies",
    "your app crashes every time I open the order history",
    "the refund of {amount} euros for ORD-{order} never reached my card",
    "is there a warranty on the {product} if I bought it in {month}",
    "the two-factor code never arrives on my phone",
    "I booked the installation for {day} at {hour} but nobody came",
    "the box was damaged and one leg of the {product} is bent",
    "please send the replacement {product} to the office in {city}",
    "I have been waiting on hold for forty minutes this morning",
    "the chat closed before the agent answered my question about ORD-{order}",
    "my company needs the invoices addressed to the {city} branch from now on",
    "the discount code SPRING{amount} does not work at checkout",
    "the manual for the {product} is missing the wiring diagram",
    "can I pick up ORD-{order} from the depot in {city} instead",
    "the subscription renewed on {day} although I switched off auto-renewal",
    "I need to add a second user to the account before {month}",
    "the firmware update bricked the {product} overnight",
];

/// Statements of fact, in the forms `extract` recognises; some are corrections.
const FACTS: [&str; 22] = [
    "my name is {first} {last}",
    "this is {first} {last} speaking",
    "my email is {email}",
    "my account number is ACC-{account}",
    "my order number is ORD-{order}",
    "ticket TCK-{ticket} is the one I opened last time",
    "my phone number is +44 20 7946 {phone}",
    "actually my phone number is +44 20 7946 {phone}, the old one is gone",
    "please contact me by {channel} rather than anything else",
    "I would prefer {channel} for updates",
    "I really like {like}",
    "I am allergic to {allergy} so no gift baskets please",
    "the deadline is {date} for the whole thing",
    "we need it sorted by {date} at the latest",
    "my billing address is {number} Harbour Street in {city}",
    "my plan is {plan} and has been for a year",
    "my favourite colour is {colour}",
    "my delivery address is the office in {city}",
    "correction, my account number is ACC-{account}",
    "my membership id is MEM-{account}",
    "my timezone is {city} time",
    "the booking reference is BK-{order}",
];

const OPENERS: [&str; 10] = [
    "Hi.",
    "Hello again.",
    "Good morning.",
    "Quick question.",
    "Sorry to bother you again.",
    "Following up on my earlier message.",
    "Hey there.",
    "One more thing.",
    "Thanks for the help earlier.",
    "Me again.",
];
const CLOSERS: [&str; 8] = [
    "Thanks!",
    "Can you help?",
    "What are my options?",
    "Please let me know.",
    "This is getting frustrating.",
    "No rush.",
    "Cheers.",
    "Any update would be great.",
];
const SHORT_USER: [&str; 8] = [
    "Thanks, that worked.",
    "Great, thank you!",
    "Ok, I will wait then.",
    "Perfect.",
    "That makes sense, thanks.",
    "Got it.",
    "Still nothing, unfortunately.",
    "Yes please, go ahead.",
];

/// What support answers, with the values the customer's messages use.
const ANSWERS: [&str; 20] = [
    "I am sorry about the delay. I checked ORD-{order}: it left our warehouse on {day} with {carrier} and should arrive within two working days.",
    "Thanks for your patience. I have opened ticket TCK-{ticket} and asked the billing team to refund the duplicate charge of {amount} euros.",
    "I can see the {plan} plan on invoice INV-{invoice}. I have corrected it, and a new invoice will reach you by email within the hour.",
    "I have sent a new password reset link. It is valid for 30 minutes; if the code still does not arrive, we can switch your two-factor method.",
    "I have booked a replacement {product} in {colour}. It ships on {day} and the return label for the old one is attached to your order.",
    "Delivery for ORD-{order} is now scheduled for {day} between {hour} and {later}. You will get a text when the driver is on the way.",
    "I have noted that you prefer to be contacted by {channel}. All updates on ticket TCK-{ticket} will come that way.",
    "The warranty on the {product} is two years from delivery, so you are covered. I have started a claim under TCK-{ticket}.",
    "I have escalated this to our technical team. They usually answer within 24 hours, and I have flagged it as urgent because of your deadline.",
    "The refund of {amount} euros was issued on {day}. Banks take three to five working days; if it has not arrived by {date}, reply here and I will chase it.",
    "I have updated the delivery address to the office in {city}. Orders placed before today keep their original address unless you ask me to change them.",
    "The discount code has expired, but I have applied a {amount}% goodwill credit to your account instead.",
    "I understand, and I am sorry the installer did not come. I have rebooked the installation for {day} at {hour} and added a note for the technician.",
    "You can collect ORD-{order} from the {city} depot from {day}; bring the order number and an ID.",
    "I have switched off auto-renewal and refunded the renewal on {day}. Your {plan} plan stays active until the end of the paid period.",
    "Noted. I have added a second user seat to account ACC-{account}; the invitation goes to the email address you give me.",
    "That firmware version has a known issue. Please hold the reset button for 15 seconds; if the {product} does not restart, we will replace it under warranty.",
    "You are welcome! Is there anything else I can help you with today?",
    "I have passed this on to the courier in {city} and asked them to confirm where the parcel was left.",
    "Thanks, I have saved that to your profile.",
];

/// Questions a customer asks later, which no message uses; each carries a number so that
/// enough distinct ones exist.
const QUESTIONS: [&str; 16] = [
    "where is my {product} from order {order} now",
    "what did you say about the refund of {amount} euros",
    "when is the delivery of order {order} scheduled",
    "which email address do you have for me, question {n}",
    "did the billing team fix the double charge of {amount} euros",
    "what is my account number again, I need it for form {n}",
    "what is the status of ticket {ticket}",
    "when was the {product} replacement supposed to ship, case {n}",
    "how do I reach you about the installation on {day}, ref {n}",
    "what phone number is on file for me, request {n}",
    "is the warranty claim for the {product} still open, claim {n}",
    "what was the deadline we agreed on for order {order}",
    "which plan am I on and what does it cost per month, note {n}",
    "can you remind me what I am allergic to, booking {n}",
    "where should the parcel for order {order} be delivered",
    "what colour {product} did I order in {month}",
];

/// Seed of the main session; other sessions derive theirs from it.
const SEED: u64 = 0x6d6c_6374_782d_6368;
const QUESTION_SEED: u64 = 0x6d6c_6374_782d_7179;

/// The values a customer's conversation keeps coming back to; some change along the way.
struct Profile {
    first: &'static str,
    last: &'static str,
    account: usize,
    order: usize,
    phone: usize,
}

/// A conversation of `turns` turns; `stream` picks an independent one (the main session is
/// stream 0), the same on every call.
pub(crate) fn conversation(stream: u64, turns: usize) -> Vec<Turn> {
    let mut random = SplitMix64::stream(SEED, stream);
    let mut profile = Profile {
        first: random.pick(&FIRST_NAMES),
        last: random.pick(&LAST_NAMES),
        account: 10_000 + random.below(90_000),
        order: 10_000 + random.below(90_000),
        phone: 1_000 + random.below(9_000),
    };
    (0..turns)
        .map(|turn| {
            // Now and then a new order, a new phone number, or a mistyped account number.
            if random.below(12) == 0 {
                profile.order = 10_000 + random.below(90_000);
            }
            if random.below(150) == 0 {
                profile.phone = 1_000 + random.below(9_000);
            }
            if random.below(200) == 0 {
                profile.account = 10_000 + random.below(90_000);
            }
            Turn {
                user: user_message(&mut random, &profile, turn),
                assistant: fill(random.pick(&ANSWERS), &mut random, &profile),
            }
        })
        .collect()
}

fn user_message(random: &mut SplitMix64, profile: &Profile, turn: usize) -> String {
    // The first message introduces the customer; after that, one message in eight is short.
    if turn > 0 && random.below(8) == 0 {
        return random.pick(&SHORT_USER).to_owned();
    }
    let mut parts: Vec<String> = Vec::new();
    if turn == 0 || random.below(3) == 0 {
        parts.push(random.pick(&OPENERS).to_owned());
    }
    if turn == 0 {
        parts.push(sentence(&fill(FACTS[0], random, profile)));
    }
    // One to three different requests.
    let first = random.below(REQUESTS.len());
    for step in 0..1 + random.below(3) {
        let request = REQUESTS[(first + step * 7) % REQUESTS.len()];
        parts.push(sentence(&fill(request, random, profile)));
    }
    if random.below(3) == 0 {
        parts.push(sentence(&fill(random.pick(&FACTS), random, profile)));
    }
    if random.below(2) == 0 {
        parts.push(random.pick(&CLOSERS).to_owned());
    }
    parts.join(" ")
}

/// A clause as a sentence: capitalised, with a full stop.
fn sentence(clause: &str) -> String {
    capitalise(clause) + "."
}

fn fill(template: &str, random: &mut SplitMix64, profile: &Profile) -> String {
    let hour = 8 + random.below(9);
    let day = random.below(28) + 1;
    let month = random.pick(&MONTHS);
    let values: [(&str, String); 24] = [
        ("{first}", profile.first.to_owned()),
        ("{last}", profile.last.to_owned()),
        (
            "{email}",
            format!(
                "{}.{}@example.com",
                profile.first.to_lowercase(),
                profile.last.to_lowercase()
            ),
        ),
        ("{account}", profile.account.to_string()),
        ("{order}", profile.order.to_string()),
        ("{phone}", profile.phone.to_string()),
        ("{ticket}", (100_000 + random.below(900_000)).to_string()),
        ("{invoice}", (2_000 + random.below(8_000)).to_string()),
        ("{amount}", (5 + random.below(200)).to_string()),
        ("{number}", (1 + random.below(200)).to_string()),
        ("{product}", random.pick(&PRODUCTS).to_owned()),
        ("{colour}", random.pick(&COLOURS).to_owned()),
        ("{city}", random.pick(&SUPPORT_CITIES).to_owned()),
        ("{day}", random.pick(&DAYS).to_owned()),
        ("{month}", month.to_owned()),
        ("{date}", format!("{day} {month}")),
        ("{hour}", format!("{hour}:00")),
        ("{later}", format!("{}:00", hour + 2)),
        ("{plan}", random.pick(&PLANS).to_owned()),
        ("{channel}", random.pick(&CHANNELS).to_owned()),
        ("{like}", random.pick(&LIKES).to_owned()),
        ("{allergy}", random.pick(&ALLERGIES).to_owned()),
        ("{carrier}", random.pick(&CARRIERS).to_owned()),
        ("{n}", (1 + random.below(100_000)).to_string()),
    ];
    replace_slots(template, &values)
}

/// `count` distinct questions, none of them in `avoid`, the same on every call.
pub(crate) fn questions(count: usize, avoid: &HashSet<&str>) -> Vec<String> {
    let mut random = SplitMix64(QUESTION_SEED);
    let mut seen = HashSet::with_capacity(count);
    let mut questions = Vec::with_capacity(count);
    while questions.len() < count {
        // Questions name orders of their own, not a customer's current one.
        let profile = Profile {
            first: "",
            last: "",
            account: 0,
            order: 10_000 + random.below(90_000),
            phone: 0,
        };
        let mut question = sentence(&fill(random.pick(&QUESTIONS), &mut random, &profile));
        question.pop();
        question.push('?');
        if !avoid.contains(question.as_str()) && seen.insert(question.clone()) {
            questions.push(question);
        }
    }
    questions
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlayer_memory::FactSheet;
    use memlayer_store::{Message, Metadata, Role, Timestamp};

    #[test]
    fn conversations_are_deterministic_and_distinct_per_stream() {
        let first = conversation(0, 50);
        let again = conversation(0, 50);
        let other = conversation(1, 50);
        assert!(first.iter().zip(&again).all(|(a, b)| a.user == b.user));
        assert!(first.iter().zip(&other).any(|(a, b)| a.user != b.user));
        assert!(first.iter().all(|turn| !turn.user.contains('{')));
        assert!(first.iter().all(|turn| !turn.assistant.contains('{')));
    }

    #[test]
    fn a_long_conversation_states_facts_with_history() {
        let messages: Vec<Message> = conversation(0, 1_000)
            .into_iter()
            .enumerate()
            .flat_map(|(turn, t)| {
                [(Role::User, t.user), (Role::Assistant, t.assistant)]
                    .into_iter()
                    .enumerate()
                    .map(move |(i, (role, content))| Message {
                        index: (2 * turn + i) as u64,
                        role,
                        content,
                        timestamp: Timestamp::from_micros(0),
                        token_count: 0,
                        metadata: Metadata::new(),
                    })
            })
            .collect();
        let sheet = FactSheet::from_messages(&messages);
        let keys = sheet.entries();
        for key in ["name", "email", "account number", "order number", "phone"] {
            assert!(keys.contains_key(key), "no {key} in {:?}", keys.keys());
        }
        assert!(keys.values().any(|entry| !entry.history.is_empty()));
    }

    #[test]
    fn questions_are_distinct_and_new() {
        let avoid = HashSet::from(["What is the status of ticket 1?"]);
        let questions = questions(2_000, &avoid);
        let distinct: HashSet<&String> = questions.iter().collect();
        assert_eq!(distinct.len(), 2_000);
        assert!(
            questions
                .iter()
                .all(|q| !q.contains('{') && q.ends_with('?'))
        );
    }
}
