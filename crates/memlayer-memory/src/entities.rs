//! Entity memory: structured facts a user states about themselves — name, email, phone,
//! account and order numbers, dates and deadlines, preferences — extracted by rules from
//! their messages, with corrections superseding earlier values while keeping the history.
//!
//! Only user messages are read: an assistant repeating a fact is not a new source, and a
//! model's guess must never become a "known fact". Every fact names the message it came
//! from, so erasing that message can remove exactly what it contributed.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use memlayer_store::{Message, Role};
use regex::Regex;
use serde::Serialize;

/// A fact as one message states it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fact {
    /// What it is about, normalised: `name`, `email`, `account number`, `contact preference`…
    pub key: String,
    /// The value as the user wrote it (trimmed).
    pub value: String,
    /// Index of the message it came from.
    pub source: u64,
    /// True when the message explicitly corrects an earlier statement.
    pub correction: bool,
}

/// The current value of a key and the values it replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FactEntry {
    /// The value now in force.
    pub value: String,
    /// The message it came from.
    pub source: u64,
    /// Whether that message was an explicit correction.
    pub correction: bool,
    /// Superseded values with their sources, oldest first.
    pub history: Vec<(String, u64)>,
}

/// Everything known about the user of a session: one entry per key, latest statement wins.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(transparent)]
pub struct FactSheet {
    entries: BTreeMap<String, FactEntry>,
}

impl FactSheet {
    /// Reads the facts of every user message, in order.
    pub fn from_messages<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Self {
        let mut sheet = Self::default();
        for message in messages {
            for fact in extract(message) {
                sheet.record(fact);
            }
        }
        sheet
    }

    /// Applies one fact: a new key is added; a different value for a known key supersedes
    /// the old one, which moves to the history.
    pub fn record(&mut self, fact: Fact) {
        match self.entries.get_mut(&fact.key) {
            Some(entry) if entry.value.eq_ignore_ascii_case(&fact.value) => {}
            Some(entry) => {
                let old = std::mem::replace(&mut entry.value, fact.value);
                entry.history.push((old, entry.source));
                entry.source = fact.source;
                entry.correction = fact.correction;
            }
            None => {
                self.entries.insert(
                    fact.key,
                    FactEntry {
                        value: fact.value,
                        source: fact.source,
                        correction: fact.correction,
                        history: Vec::new(),
                    },
                );
            }
        }
    }

    /// The entries, by key.
    pub fn entries(&self) -> &BTreeMap<String, FactEntry> {
        &self.entries
    }

    /// True when nothing is known.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `Known facts:` block put ahead of the window; `None` when nothing is known.
    /// A corrected value says what it replaced, so the model does not trust an older
    /// statement it may still see in the window.
    pub fn render(&self) -> Option<String> {
        if self.entries.is_empty() {
            return None;
        }
        let mut out = String::from("Known facts:");
        for (key, entry) in &self.entries {
            out.push_str(&format!("\n- {key}: {}", entry.value));
            if let Some((previous, _)) = entry.history.last() {
                out.push_str(&format!(" (corrected; earlier: {previous})"));
            }
        }
        Some(out)
    }

    /// The sheet with personal data in its values (and their history) replaced by
    /// placeholders, for text that is persisted or sent to a model.
    pub fn redacted(&self) -> Self {
        let redact = |value: &str| crate::pii::redact_pii(value).into_owned();
        Self {
            entries: self
                .entries
                .iter()
                .map(|(key, entry)| {
                    let entry = FactEntry {
                        value: redact(&entry.value),
                        history: entry
                            .history
                            .iter()
                            .map(|(old, source)| (redact(old), *source))
                            .collect(),
                        ..entry.clone()
                    };
                    (key.clone(), entry)
                })
                .collect(),
        }
    }

    /// Indices of the messages the current values came from.
    pub fn sources(&self) -> Vec<u64> {
        let mut sources: Vec<u64> = self.entries.values().map(|e| e.source).collect();
        sources.sort_unstable();
        sources.dedup();
        sources
    }
}

macro_rules! regex {
    ($pattern:expr) => {{
        static RE: LazyLock<Regex> =
            LazyLock::new(|| Regex::new($pattern).expect("the pattern is valid"));
        &*RE
    }};
}

/// Words after "my" that name no durable fact ("my question is", "my bad").
const NOT_A_FACT: &[&str] = &[
    "question",
    "problem",
    "issue",
    "point",
    "bad",
    "guess",
    "concern",
    "pleasure",
    "turn",
    "answer",
    "understanding",
    "mistake",
    "apologies",
    "fault",
];

/// The facts one message states. Non-user messages state none.
pub fn extract(message: &Message) -> Vec<Fact> {
    if message.role != Role::User {
        return Vec::new();
    }
    let text = message.content.as_str();
    let correction = regex!(
        r"(?i)\b(actually|correction|i meant|i misspoke|sorry,? (?:i|it|my)|not .{1,40} but|let me correct|that's wrong|that was wrong)\b"
    )
    .is_match(text);
    let mut facts = Vec::new();
    let mut push = |key: &str, value: &str| {
        let value = value
            .trim()
            .trim_end_matches(['.', ',', '!', '?', ';', ':'])
            .trim();
        if !value.is_empty() && value.len() <= 120 {
            facts.push(Fact {
                key: key.to_owned(),
                value: value.to_owned(),
                source: message.index,
                correction,
            });
        }
    };

    // "my <thing> is <value>": the general form most self-descriptions take.
    // A value runs to the end of its clause; a separator between digits ("5,500", "2.5")
    // belongs to the number.
    for caps in
        regex!(r"(?i)\bmy ((?:[a-z]+ ){0,2}[a-z]+)(?: is|'s| are| was) ((?:\d[.,]\d|[^.,;!?\n])+)")
            .captures_iter(text)
    {
        let key = caps[1].to_lowercase();
        if key.split(' ').any(|word| NOT_A_FACT.contains(&word)) {
            continue;
        }
        let key = match key.as_str() {
            "name" | "full name" | "first name" => "name".to_owned(),
            "email" | "email address" | "e-mail" | "e-mail address" => "email".to_owned(),
            "phone" | "phone number" | "number" | "mobile" | "mobile number" | "cell" => {
                "phone".to_owned()
            }
            _ => key,
        };
        // "my name is Alice, not Alicia": keep the value before the contrast.
        let value = caps[2].split(" not ").next().unwrap_or_default();
        let value = value.split(" and ").next().unwrap_or_default();
        push(&key, value);
    }

    // Introductions and name corrections.
    for caps in regex!(
        r"\b(?:[Cc]all me|I'm|I am|[Tt]his is|it's|[Ii]t is)\s+([A-Z][a-z]+(?:[ -][A-Z][a-z]+)?)\b(?:\s*,?\s*(?:not|here|speaking|by the way)\b|\s*[.!]|\s*$)"
    )
    .captures_iter(text)
    {
        let name = &caps[1];
        if !matches!(name, "I" | "Sorry" | "Thanks" | "Happy" | "Fine" | "Good" | "Here") {
            push("name", name);
        }
    }

    for found in regex!(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}").find_iter(text) {
        push("email", found.as_str());
    }
    for found in regex!(r"\+?\d[\d ().-]{5,}\d").find_iter(text) {
        // "not 555-0100": the number being corrected away is no longer the user's.
        if regex!(r"(?i)\b(?:not|instead of|rather than|no longer|old number(?: is| was)?)\W*$")
            .is_match(&text[..found.start()])
        {
            continue;
        }
        let digits = found.as_str().chars().filter(char::is_ascii_digit).count();
        let is_date = regex!(r"^\d{4}-\d{2}-\d{2}$").is_match(found.as_str());
        // Ids look like phone numbers too: only call it a phone number when the message
        // talks about phones or the number is international.
        let about_phones = found.as_str().starts_with('+')
            || regex!(r"(?i)\b(phone|call|mobile|cell|tel|whatsapp|reach me|text me)\b")
                .is_match(text);
        if (7..=15).contains(&digits) && !is_date && about_phones {
            push("phone", found.as_str());
        }
    }
    for caps in regex!(
        r"(?i)\b(account|order|booking|ticket|invoice|policy|customer|member(?:ship)?|reference|tracking|case)(?: number| no\.?| #| id| code| reference)?\s*(?:is|:|=|#)?\s*#?([A-Z0-9][A-Z0-9-]{2,})\b"
    )
    .captures_iter(text)
    {
        if caps[2].chars().any(|c| c.is_ascii_digit()) {
            let kind = caps[1].to_lowercase();
            let key = if kind == "account" || kind == "order" {
                format!("{kind} number")
            } else {
                format!("{kind} id")
            };
            push(&key, &caps[2]);
        }
    }

    // Dates and deadlines.
    macro_rules! date {
        () => {
            r"((?:next )?(?:mon|tues|wednes|thurs|fri|satur|sun)day|tomorrow|(?:\d{1,2}(?:st|nd|rd|th)? (?:of )?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*(?: \d{4})?)|(?:(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]* \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?)|\d{4}-\d{2}-\d{2}|end of (?:the )?(?:week|month|quarter|year))"
        };
    }
    for caps in regex!(concat!(
        r"(?i)\b(?:deadline|due|by|no later than|before)\b(?: date)?(?: is)?\s+(?:on\s+)?",
        date!()
    ))
    .captures_iter(text)
    {
        push("deadline", &caps[1]);
    }

    // Preferences: how to be contacted, and likes and dislikes.
    for caps in regex!(
        r"(?i)\b(?:contact|reach|call|message|text|email) me (?:by|via|over|through|on) (e-?mail|phone|sms|text(?: message)?|whatsapp|signal|slack|telegram|post|letter)\b"
    )
    .captures_iter(text)
    {
        push("contact preference", &caps[1].to_lowercase());
    }
    for caps in regex!(
        r"(?i)\bi (?:would |'d )?prefer (?:to be contacted |to be reached |being contacted |contact )?(?:by |via |over )?(e-?mail|phone(?: calls?)?|sms|text(?: messages?)?|whatsapp|signal|slack|telegram)\b"
    )
    .captures_iter(text)
    {
        push("contact preference", &caps[1].to_lowercase());
    }
    for caps in regex!(
        r"(?i)\bi (?:really )?(prefer|like|love|enjoy|hate|dislike|don't like|do not like|can't stand|am allergic to|'m allergic to)\s+([^.,;!?\n]+)"
    )
    .captures_iter(text)
    {
        let stance = caps[1].to_lowercase().replace("'m ", "am ");
        let object = caps[2].trim();
        if regex!(r"(?i)^(?:to be contacted|to be reached|being contacted|contact)\b")
            .is_match(object)
        {
            continue;
        }
        let topic: String = object
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        push(&format!("{stance} {topic}"), object);
    }
    // Several rules may find the same fact; state it once.
    let mut seen = std::collections::HashSet::new();
    facts.retain(|fact| seen.insert((fact.key.clone(), fact.value.clone())));
    facts
}

#[cfg(test)]
mod tests {
    use memlayer_store::Timestamp;

    use super::*;

    fn user(index: u64, content: &str) -> Message {
        Message {
            index,
            role: Role::User,
            content: content.to_owned(),
            timestamp: Timestamp::from_micros(0),
            token_count: 0,
            metadata: Default::default(),
        }
    }

    fn facts(content: &str) -> Vec<(String, String)> {
        extract(&user(0, content))
            .into_iter()
            .map(|f| (f.key, f.value))
            .collect()
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn self_descriptions() {
        assert_eq!(
            facts("Hi! My name is Alice Meyer."),
            pairs(&[("name", "Alice Meyer")])
        );
        assert_eq!(
            facts("My account number is 88-4217-09, thanks"),
            pairs(&[("account number", "88-4217-09")])
        );
        assert_eq!(
            facts("my favourite colour is teal"),
            pairs(&[("favourite colour", "teal")])
        );
        assert_eq!(facts("My question is about billing"), pairs(&[]));
        assert_eq!(facts("Call me Bob."), pairs(&[("name", "Bob")]));
        assert_eq!(
            facts("My budget is 5,500 euros, maybe 2.5k more."),
            pairs(&[("budget", "5,500 euros")])
        );
    }

    #[test]
    fn a_corrected_phone_number_is_not_taken_for_the_new_one() {
        assert_eq!(
            facts("Sorry, call me on +44 7700 900123, not +44 7700 900999."),
            pairs(&[("phone", "+44 7700 900123")])
        );
        assert_eq!(
            facts("Please use +1 415 555 0199 instead of +1 415 555 0100 from now on"),
            pairs(&[("phone", "+1 415 555 0199")])
        );
    }

    #[test]
    fn contact_details_and_ids() {
        assert_eq!(
            facts("you can write to alice.meyer@example.org or call +49 30 1234567"),
            pairs(&[
                ("email", "alice.meyer@example.org"),
                ("phone", "+49 30 1234567")
            ])
        );
        assert_eq!(
            facts("Where is order #A1234?"),
            pairs(&[("order number", "A1234")])
        );
        assert_eq!(facts("The meeting was in 2024"), pairs(&[]));
    }

    #[test]
    fn deadlines_and_preferences() {
        assert_eq!(
            facts("The report is due on Friday"),
            pairs(&[("deadline", "Friday")])
        );
        assert_eq!(
            facts("Please contact me by email, I prefer to be contacted by email"),
            pairs(&[("contact preference", "email")])
        );
        assert_eq!(
            facts("I love spicy Thai food"),
            pairs(&[("love spicy thai food", "spicy Thai food")])
        );
    }

    #[test]
    fn corrections_supersede_and_keep_history() {
        let messages = [
            user(1, "My name is Alicia."),
            user(3, "I prefer to be contacted by phone"),
            user(5, "Actually, my name is Alice, not Alicia."),
            user(7, "Sorry, please contact me by email instead"),
        ];
        let sheet = FactSheet::from_messages(&messages);
        let name = &sheet.entries()["name"];
        assert_eq!(
            (name.value.as_str(), name.source, name.correction),
            ("Alice", 5, true)
        );
        assert_eq!(name.history, [("Alicia".to_owned(), 1)]);
        assert_eq!(sheet.entries()["contact preference"].value, "email");
        assert_eq!(
            sheet.render().unwrap(),
            "Known facts:\n- contact preference: email (corrected; earlier: phone)\n- name: Alice (corrected; earlier: Alicia)"
        );
        assert_eq!(sheet.sources(), [5, 7]);
    }

    #[test]
    fn assistant_messages_state_no_facts() {
        let mut message = user(0, "My name is Alice.");
        message.role = Role::Assistant;
        assert!(extract(&message).is_empty());
    }
}
