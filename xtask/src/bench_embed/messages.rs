//! The benchmark's texts: short chat messages of 5 to 40 words, generated from a fixed seed
//! so every run (and both sides of the comparison) embeds exactly the same texts. Lengths
//! are spread evenly over the range because padding makes the cost of a batch depend on the
//! mix of lengths, and real conversations mix one-liners with paragraphs.
//!
//! `bench-index` builds its wider corpus from the same parts (generator, openers,
//! connectors, closers) so both benchmarks' texts read alike.

use std::collections::HashSet;

pub(crate) const MIN_WORDS: usize = 5;
pub(crate) const MAX_WORDS: usize = 40;

/// Every clause has at least `MIN_WORDS` words, so a message of one clause is long enough.
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

pub(crate) const OPENERS: [&str; 8] = [
    "hi",
    "hey",
    "ok so",
    "morning",
    "quick one",
    "sorry",
    "also",
    "thanks,",
];
pub(crate) const CONNECTORS: [&str; 7] =
    ["and", "but", "also", "because", "so", "then", "by the way"];
pub(crate) const CLOSERS: [&str; 6] = [
    "thanks!",
    "no rush.",
    "asap please.",
    "does that work?",
    "any ideas?",
    "cheers",
];

const CITIES: [&str; 6] = ["Lisbon", "Berlin", "Osaka", "Toronto", "Nairobi", "Lyon"];
pub(crate) const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 6] = ["January", "March", "May", "July", "September", "November"];
const NAMES: [&str; 8] = [
    "Alice", "Bob", "Priya", "Tomasz", "Mei", "Carlos", "Fatima", "Jonas",
];
const COLOURS: [&str; 6] = ["blue", "green", "red", "yellow", "black", "orange"];
const TOPICS: [&str; 6] = [
    "marketing offsite",
    "billing migration",
    "office move",
    "hiring plan",
    "mobile release",
    "security audit",
];
const TIMES: [&str; 5] = ["9am", "noon", "half past two", "6pm", "8 in the evening"];

/// `count` distinct messages, the same on every call.
pub(crate) fn messages(count: usize) -> Vec<String> {
    let mut random = SplitMix64(0x6d65_6d6c_6179_6572);
    let mut seen = HashSet::with_capacity(count);
    let mut messages = Vec::with_capacity(count);
    while messages.len() < count {
        let message = message(&mut random);
        if seen.insert(message.clone()) {
            messages.push(message);
        }
    }
    messages
}

fn message(random: &mut SplitMix64) -> String {
    let target = MIN_WORDS + random.below(MAX_WORDS - MIN_WORDS + 1);
    let mut words: Vec<String> = Vec::new();
    if random.below(3) == 0 {
        push(&mut words, random.pick(&OPENERS));
    }
    loop {
        push(&mut words, &fill(random.pick(&CLAUSES), random));
        let room = target.saturating_sub(words.len());
        if room == 0 {
            break;
        }
        if room <= 3 {
            push(&mut words, random.pick(&CLOSERS));
            break;
        }
        push(&mut words, random.pick(&CONNECTORS));
    }
    // A message cut at its target length reads like one typed in a hurry, which chat is.
    words.truncate(target);
    let mut text = words.join(" ");
    let mut first = text.chars();
    if let Some(initial) = first.next() {
        text = initial.to_uppercase().chain(first).collect();
    }
    text
}

fn push(words: &mut Vec<String>, text: &str) {
    words.extend(text.split(' ').map(str::to_owned));
}

fn fill(clause: &str, random: &mut SplitMix64) -> String {
    let mut text = clause.to_owned();
    let number = (1000 + random.below(9000)).to_string();
    let count = (2 + random.below(9)).to_string();
    let slots: [(&str, &str); 9] = [
        ("{number}", &number),
        ("{count}", &count),
        ("{city}", random.pick(&CITIES)),
        ("{day}", random.pick(&DAYS)),
        ("{month}", random.pick(&MONTHS)),
        ("{name}", random.pick(&NAMES)),
        ("{colour}", random.pick(&COLOURS)),
        ("{topic}", random.pick(&TOPICS)),
        ("{time}", random.pick(&TIMES)),
    ];
    for (slot, value) in slots {
        text = text.replace(slot, value);
    }
    text
}

/// SplitMix64: a tiny, well-known generator; good enough for varied test text and free of
/// a dependency whose output could change between versions.
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (bias is negligible for the small bounds used here).
    pub(crate) fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    pub(crate) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_distinct_deterministic_and_varied_in_length() {
        let first = messages(1000);
        assert_eq!(first, messages(1000));
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
}
