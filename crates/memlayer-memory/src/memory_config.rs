//! The per-agent memory configuration document, in the shape agent frameworks use:
//!
//! ```json
//! { "session_memory": true,
//!   "types": [
//!     { "id": "working_memory", "enabled": true,
//!       "config": { "max_tokens": 4000, "compaction_strategy": "summarize" } },
//!     { "id": "long_term", "enabled": true, "config": { "max_memories": 50 } },
//!     { "id": "episodic", "enabled": true, "config": { "max_lessons": 5 } } ] }
//! ```
//!
//! It is another view of the context settings, not a second source of truth: a document maps
//! onto settings keys (saved as the agent's settings, so it applies from the next turn on),
//! and the document an agent reads back is derived from its effective settings.
//!
//! | document | settings key |
//! |---|---|
//! | `session_memory` | `session_memory` |
//! | `working_memory.config.max_tokens` | `context_window` |
//! | `working_memory.config.compaction_strategy` (`summarize`, `drop`) | `overflow` |
//! | `long_term.enabled` | `long_term_memory` |
//! | `long_term.config.max_memories`, `.max_tokens` | `max_memories`, `memory_tokens` |
//! | `episodic.enabled` | `lessons` |
//! | `episodic.config.max_lessons`, `.max_tokens`, `.task_type` | `max_lessons`, `lesson_tokens`, `task_type` |

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::MemoryError;
use crate::assemble::{ContextSettings, SettingsOverrides};

/// The memory types a document may configure.
pub const MEMORY_TYPES: [&str; 3] = ["working_memory", "long_term", "episodic"];

/// A memory configuration document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryConfig {
    /// Whether the summary of earlier conversations is loaded.
    pub session_memory: bool,
    /// One entry per memory type, in [`MEMORY_TYPES`] order.
    pub types: Vec<MemoryType>,
}

/// One memory type's entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryType {
    /// One of [`MEMORY_TYPES`].
    pub id: &'static str,
    /// Whether its layer is in the context.
    pub enabled: bool,
    /// Its settings.
    pub config: Map<String, Value>,
}

/// One key of a type's `config`: the settings key it sets.
struct ConfigKey {
    name: &'static str,
    setting: &'static str,
    kind: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    /// A whole number that fits the settings' integers.
    Count,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// A string or `null`.
    OptionalText,
}

const fn key(name: &'static str, setting: &'static str, kind: Kind) -> ConfigKey {
    ConfigKey {
        name,
        setting,
        kind,
    }
}

/// Per type: the settings key `enabled` sets (`None`: it cannot be turned off) and its
/// config keys.
fn schema(id: &str) -> Option<(Option<&'static str>, &'static [ConfigKey])> {
    const WORKING: &[ConfigKey] = &[
        key("max_tokens", "context_window", Kind::Count),
        key(
            "compaction_strategy",
            "overflow",
            Kind::Choice(&["summarize", "drop"]),
        ),
    ];
    const LONG_TERM: &[ConfigKey] = &[
        key("max_memories", "max_memories", Kind::Count),
        key("max_tokens", "memory_tokens", Kind::Count),
    ];
    const EPISODIC: &[ConfigKey] = &[
        key("max_lessons", "max_lessons", Kind::Count),
        key("max_tokens", "lesson_tokens", Kind::Count),
        key("task_type", "task_type", Kind::OptionalText),
    ];
    match id {
        // The recent conversation is what every context is built around.
        "working_memory" => Some((None, WORKING)),
        "long_term" => Some((Some("long_term_memory"), LONG_TERM)),
        "episodic" => Some((Some("lessons"), EPISODIC)),
        _ => None,
    }
}

impl MemoryConfig {
    /// The document describing `settings`.
    pub fn from_settings(settings: &ContextSettings) -> Self {
        let Value::Object(values) =
            serde_json::to_value(settings).expect("settings serialise to JSON")
        else {
            unreachable!("settings serialise to a JSON object")
        };
        let types = MEMORY_TYPES
            .iter()
            .map(|&id| {
                let (enabled, keys) = schema(id).expect("every listed type has a schema");
                // The document speaks of compaction, the settings of overflow: same words.
                let config = keys
                    .iter()
                    .map(|key| (key.name.to_owned(), values[key.setting].clone()))
                    .collect();
                MemoryType {
                    id,
                    enabled: enabled.is_none_or(|setting| values[setting] == json!(true)),
                    config,
                }
            })
            .collect();
        Self {
            session_memory: settings.session_memory,
            types,
        }
    }

    /// The settings keys `document` sets, checked: unknown memory types, unknown keys, wrong
    /// JSON types and out-of-range values are refused with the document path of the field
    /// (`types[1].config.max_memories`). Types and keys the document leaves out are not set.
    pub fn to_overrides(document: &Value) -> Result<SettingsOverrides, MemoryError> {
        // A count written as a whole float (`5.0`) is the integer, as in JSON Schema.
        let mut document = document.clone();
        crate::whole_floats_to_integers(&mut document);
        let document = &document;
        let mut overrides = SettingsOverrides::new();
        // Which document field set each settings key, to name it when a value is out of range.
        let mut origins: Vec<(&'static str, String)> = Vec::new();
        let top = object(document, "the document")?;
        for (name, value) in top {
            match name.as_str() {
                "session_memory" => {
                    overrides.insert("session_memory".into(), boolean(value, "session_memory")?);
                    origins.push(("session_memory", "session_memory".into()));
                }
                "types" => {}
                other => {
                    return Err(invalid(
                        other,
                        "unknown key; expected session_memory or types",
                    ));
                }
            }
        }
        let types = match top.get("types") {
            None => &Vec::new(),
            Some(Value::Array(types)) => types,
            Some(_) => return Err(invalid("types", "must be an array")),
        };
        let mut seen = Vec::new();
        for (position, entry) in types.iter().enumerate() {
            let at = format!("types[{position}]");
            let entry = object(entry, &at)?;
            let id = match entry.get("id") {
                Some(Value::String(id)) => id.as_str(),
                Some(_) => return Err(invalid(&format!("{at}.id"), "must be a string")),
                None => return Err(invalid(&format!("{at}.id"), "is required")),
            };
            let Some((enabled_setting, keys)) = schema(id) else {
                return Err(MemoryError::UnknownMemoryType {
                    field: format!("{at}.id"),
                    id: id.to_owned(),
                });
            };
            if seen.contains(&id) {
                return Err(invalid(&format!("{at}.id"), "names a type listed before"));
            }
            seen.push(id);
            for (name, value) in entry {
                let field = format!("{at}.{name}");
                match (name.as_str(), enabled_setting) {
                    ("id", _) => {}
                    ("enabled", Some(setting)) => {
                        overrides.insert(setting.into(), boolean(value, &field)?);
                        origins.push((setting, field));
                    }
                    ("enabled", None) => {
                        if boolean(value, &field)? != json!(true) {
                            return Err(invalid(&field, "working memory cannot be turned off"));
                        }
                    }
                    ("config", _) => {
                        for (name, value) in object(value, &field)? {
                            let field = format!("{field}.{name}");
                            let Some(key) = keys.iter().find(|key| key.name == name) else {
                                let known: Vec<_> = keys.iter().map(|key| key.name).collect();
                                let reason = format!("unknown key; expected one of {known:?}");
                                return Err(invalid(&field, &reason));
                            };
                            overrides.insert(key.setting.into(), typed(value, key.kind, &field)?);
                            origins.push((key.setting, field));
                        }
                    }
                    _ => {
                        return Err(invalid(
                            &field,
                            "unknown key; expected id, enabled or config",
                        ));
                    }
                }
            }
        }
        // The ranges are the settings' own: check them there, and name the document's field.
        ContextSettings::layered([&overrides]).map_err(|err| match err {
            MemoryError::InvalidSetting { field, reason } => {
                let origin = origins.iter().find(|(setting, _)| *setting == field);
                let named = origin.map_or(field.to_owned(), |(_, path)| path.clone());
                invalid(&named, &reason)
            }
            other => other,
        })?;
        Ok(overrides)
    }
}

fn invalid(field: &str, reason: &str) -> MemoryError {
    MemoryError::InvalidMemoryConfig {
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}

fn object<'a>(value: &'a Value, field: &str) -> Result<&'a Map<String, Value>, MemoryError> {
    value
        .as_object()
        .ok_or_else(|| invalid(field, "must be an object"))
}

fn boolean(value: &Value, field: &str) -> Result<Value, MemoryError> {
    match value {
        Value::Bool(_) => Ok(value.clone()),
        _ => Err(invalid(field, "must be true or false")),
    }
}

fn typed(value: &Value, kind: Kind, field: &str) -> Result<Value, MemoryError> {
    match (kind, value) {
        (Kind::Count, Value::Number(n)) if n.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)) => {
            Ok(value.clone())
        }
        (Kind::Count, _) => Err(invalid(
            field,
            &format!("must be a whole number from 0 to {}", u32::MAX),
        )),
        (Kind::Choice(choices), Value::String(choice)) if choices.contains(&choice.as_str()) => {
            Ok(value.clone())
        }
        (Kind::Choice(choices), _) => Err(invalid(
            field,
            &format!("must be one of {}", choices.join(", ")),
        )),
        (Kind::OptionalText, Value::String(_) | Value::Null) => Ok(value.clone()),
        (Kind::OptionalText, _) => Err(invalid(field, "must be a string or null")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides(document: Value) -> Result<Value, String> {
        MemoryConfig::to_overrides(&document)
            .map(Value::Object)
            .map_err(|err| err.to_string())
    }

    #[test]
    fn a_document_maps_onto_settings_keys() {
        let document = json!({
            "session_memory": false,
            "types": [
                { "id": "working_memory", "enabled": true,
                  "config": { "max_tokens": 4000, "compaction_strategy": "summarize" } },
                { "id": "long_term", "enabled": false, "config": { "max_memories": 20 } },
                { "id": "episodic", "config": { "max_lessons": 3, "task_type": "refund" } },
            ],
        });
        assert_eq!(
            overrides(document).unwrap(),
            json!({
                "session_memory": false,
                "context_window": 4000,
                "overflow": "summarize",
                "long_term_memory": false,
                "max_memories": 20,
                "max_lessons": 3,
                "task_type": "refund",
            })
        );
        assert_eq!(overrides(json!({})).unwrap(), json!({}));
    }

    #[test]
    fn the_document_read_back_describes_the_settings_in_force() {
        let settings = ContextSettings::layered([&MemoryConfig::to_overrides(&json!({
            "types": [
                { "id": "working_memory", "config": { "max_tokens": 4000, "compaction_strategy": "summarize" } },
                { "id": "long_term", "enabled": false },
            ],
        }))
        .unwrap()])
        .unwrap();
        let document = serde_json::to_value(MemoryConfig::from_settings(&settings)).unwrap();
        assert_eq!(
            document,
            json!({
                "session_memory": true,
                "types": [
                    { "id": "working_memory", "enabled": true,
                      "config": { "max_tokens": 4000, "compaction_strategy": "summarize" } },
                    { "id": "long_term", "enabled": false,
                      "config": { "max_memories": 50, "max_tokens": 1000 } },
                    { "id": "episodic", "enabled": true,
                      "config": { "max_lessons": 5, "max_tokens": 500, "task_type": null } },
                ],
            })
        );
        // What is read back can be written again and means the same.
        let again = MemoryConfig::to_overrides(&document).unwrap();
        assert_eq!(ContextSettings::layered([&again]).unwrap(), settings);
    }

    #[test]
    fn mistakes_are_refused_with_the_field_named() {
        let working =
            |config: Value| json!({ "types": [{ "id": "working_memory", "config": config }] });
        for (document, expected) in [
            (json!([]), "invalid the document: must be an object"),
            (json!({ "types": {} }), "invalid types: must be an array"),
            (
                json!({ "session_memory": "yes" }),
                "invalid session_memory: must be true or false",
            ),
            (json!({ "colour": 1 }), "invalid colour: unknown key"),
            (
                json!({ "types": [{ "id": "semantic" }] }),
                "unknown memory type \"semantic\" at types[0].id",
            ),
            (
                json!({ "types": [{ "enabled": true }] }),
                "invalid types[0].id: is required",
            ),
            (
                json!({ "types": [{ "id": "episodic" }, { "id": "episodic" }] }),
                "invalid types[1].id: names a type listed before",
            ),
            (
                json!({ "types": [{ "id": "working_memory", "enabled": false }] }),
                "invalid types[0].enabled: working memory cannot be turned off",
            ),
            (
                working(json!({ "max_tokens": "4000" })),
                "invalid types[0].config.max_tokens: must be a whole number",
            ),
            (
                working(json!({ "max_tokens": -1 })),
                "invalid types[0].config.max_tokens: must be a whole number",
            ),
            (
                working(json!({ "max_tokens": 10 })),
                "invalid types[0].config.max_tokens: must be between 256",
            ),
            (
                working(json!({ "compaction_strategy": "squash" })),
                "invalid types[0].config.compaction_strategy: must be one of summarize, drop",
            ),
            (
                working(json!({ "max_turns": 3 })),
                "invalid types[0].config.max_turns: unknown key",
            ),
            (
                json!({ "types": [{ "id": "long_term", "config": { "max_memories": 500 } }] }),
                "invalid types[0].config.max_memories: must be at most 200",
            ),
            (
                json!({ "types": [{ "id": "episodic", "config": { "task_type": "two words" } }] }),
                "invalid types[0].config.task_type: ",
            ),
        ] {
            let error = overrides(document.clone()).unwrap_err();
            assert!(error.starts_with(expected), "{document}: {error}");
        }
    }
}
