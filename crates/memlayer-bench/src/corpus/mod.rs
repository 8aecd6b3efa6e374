//! The benchmarks' synthetic texts, in one place: chat messages (`chat`: short ones for the
//! embedding benchmark, topical ones and questions about them for the index, commit-mode and
//! recovery benchmarks), support conversations with facts in them (`support`, for the context
//! benchmark) and long-term memories with questions about them (`memories`).
//!
//! Every stream is generated from a fixed seed, so every run (and both sides of a comparison)
//! works on exactly the same texts; the benchmarks' figures and the index benchmark's vector
//! cache depend on that. The generators share the random number generator, the word lists
//! (each generator takes a prefix of a list, so its draws stay what they were when the lists
//! were its own) and the way a template's slots are filled. Changing a word list, or the order
//! of draws in a generator, changes the texts of every benchmark that uses it: say so in
//! docs/benchmarks.md next to those benchmarks.

pub(crate) mod chat;
pub(crate) mod memories;
pub(crate) mod support;

/// Messages are 5 to 40 words: real conversations mix one-liners with paragraphs.
pub(crate) const MIN_WORDS: usize = 5;
pub(crate) const MAX_WORDS: usize = 40;

/// How a chat message may open, join its clauses and close.
const OPENERS: [&str; 8] = [
    "hi",
    "hey",
    "ok so",
    "morning",
    "quick one",
    "sorry",
    "also",
    "thanks,",
];
const CONNECTORS: [&str; 7] = ["and", "but", "also", "because", "so", "then", "by the way"];
const CLOSERS: [&str; 6] = [
    "thanks!",
    "no rush.",
    "asap please.",
    "does that work?",
    "any ideas?",
    "cheers",
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
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
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

/// The first `n` words of `list`: a generator with a smaller vocabulary draws from a prefix.
const fn first<const N: usize>(
    list: &'static [&'static str; N],
    n: usize,
) -> &'static [&'static str] {
    list.split_at(n).0
}

/// One slot of a template and how its value is drawn. A generator lists its slots in the
/// order it draws them; each is drawn whether or not the template uses it, so the stream's
/// position does not depend on the template.
#[derive(Clone, Copy)]
pub(crate) enum Slot {
    /// `{number}`: four digits, as order and ticket numbers.
    Number,
    /// `{count}`: 2 to 10.
    Count,
    /// `{amount}`: 20 to 1,990 in tens, with a currency.
    Amount,
    /// A slot filled with one word of a list.
    Word(&'static str, &'static [&'static str]),
}

impl Slot {
    fn draw(self, random: &mut SplitMix64) -> (&'static str, String) {
        match self {
            Self::Number => ("{number}", (1000 + random.below(9000)).to_string()),
            Self::Count => ("{count}", (2 + random.below(9)).to_string()),
            Self::Amount => {
                let amount = 10 * (2 + random.below(199));
                ("{amount}", format!("{amount} {}", random.pick(&CURRENCIES)))
            }
            Self::Word(slot, words) => (slot, random.pick(words).to_owned()),
        }
    }
}

/// `template` with every slot of `slots` drawn and put in its place.
pub(crate) fn fill(template: &str, slots: &[Slot], random: &mut SplitMix64) -> String {
    let values: Vec<(&str, String)> = slots.iter().map(|slot| slot.draw(random)).collect();
    replace_slots(template, &values)
}

/// `template` with each `(slot, value)` put in place.
pub(crate) fn replace_slots<S: AsRef<str>>(template: &str, values: &[(&str, S)]) -> String {
    let mut text = template.to_owned();
    for (slot, value) in values {
        if text.contains(slot) {
            text = text.replace(slot, value.as_ref());
        }
    }
    text
}

/// Where a chat message's clauses come from.
trait Clauses {
    fn next(&mut self, random: &mut SplitMix64) -> String;

    /// Called after each connector, before the next clause.
    fn after_connector(&mut self, _random: &mut SplitMix64) {}
}

/// A chat message of `target` words: an opener one time in three, clauses joined by
/// connectors, a closer when three words or fewer are left, cut at `target` (a message cut
/// short reads like one typed in a hurry, which chat is) and capitalised.
fn compose(random: &mut SplitMix64, target: usize, clauses: &mut impl Clauses) -> String {
    let mut words: Vec<String> = Vec::new();
    if random.below(3) == 0 {
        push(&mut words, random.pick(&OPENERS));
    }
    loop {
        push(&mut words, &clauses.next(random));
        let room = target.saturating_sub(words.len());
        if room == 0 {
            break;
        }
        if room <= 3 {
            push(&mut words, random.pick(&CLOSERS));
            break;
        }
        push(&mut words, random.pick(&CONNECTORS));
        clauses.after_connector(random);
    }
    words.truncate(target);
    capitalise(&words.join(" "))
}

/// A message's length in words, spread evenly over the range: padding makes the cost of an
/// embedding batch depend on the mix of lengths.
fn target_words(random: &mut SplitMix64) -> usize {
    MIN_WORDS + random.below(MAX_WORDS - MIN_WORDS + 1)
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

/// SplitMix64: a tiny, well-known generator; good enough for varied test text and free of
/// a dependency whose output could change between versions.
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    /// The generator of stream `stream` of `seed`: streams of one seed are independent.
    pub(crate) fn stream(seed: u64, stream: u64) -> Self {
        Self(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

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
