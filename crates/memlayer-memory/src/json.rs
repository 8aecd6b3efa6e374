//! JSON numbers as JSON Schema reads them.

use serde_json::{Number, Value};

/// Rewrites every number in `value` that is a whole number written as a float (`475.0`, `1e3`)
/// as an integer, when one fits. JSON Schema counts such numbers as integers (a generated
/// client or a Python caller that computed a budget sends them), while serde refuses a float
/// for an integer field; after this, fields of a float type still accept the integer.
/// Returns whether anything changed.
pub fn whole_floats_to_integers(value: &mut Value) -> bool {
    match value {
        Value::Number(number) => match whole(number) {
            Some(integer) => {
                *number = integer;
                true
            }
            None => false,
        },
        Value::Array(items) => items.iter_mut().fold(false, |changed, item| {
            whole_floats_to_integers(item) | changed
        }),
        Value::Object(fields) => fields.values_mut().fold(false, |changed, field| {
            whole_floats_to_integers(field) | changed
        }),
        Value::Null | Value::Bool(_) | Value::String(_) => false,
    }
}

/// The integer a float `number` is equal to, if it is whole and within `i64` or `u64`.
fn whole(number: &Number) -> Option<Number> {
    if number.is_i64() || number.is_u64() {
        return None;
    }
    let float = number.as_f64()?;
    if float.fract() != 0.0 {
        return None;
    }
    // The casts saturate; the range checks keep only exact conversions (2^64 and 2^63 are
    // floats that are whole but out of range).
    if (0.0..18_446_744_073_709_551_616.0).contains(&float) {
        Some(Number::from(float as u64))
    } else if (-9_223_372_036_854_775_808.0..0.0).contains(&float) {
        Some(Number::from(float as i64))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_whole_number_found_by_schemathesis_is_read_exactly() {
        let mut value: Value = serde_json::from_str("[1803990227824355.0]").unwrap();
        assert!(whole_floats_to_integers(&mut value));
        assert_eq!(value, json!([1_803_990_227_824_355_u64]));
    }

    #[test]
    fn whole_floats_become_integers_and_the_rest_stays() {
        let mut value = json!({
            "a": 475.0, "b": [1e3, 0.5, -2.0, -0.0], "c": 7, "d": "8.0", "e": 1e300,
        });
        assert!(whole_floats_to_integers(&mut value));
        assert_eq!(
            value,
            json!({ "a": 475, "b": [1000, 0.5, -2, 0], "c": 7, "d": "8.0", "e": 1e300 })
        );
        assert!(value["a"].is_u64());
        assert!(
            !whole_floats_to_integers(&mut value),
            "nothing left to change"
        );
    }

    proptest! {
        /// A whole number a client writes with `.0` is read as that number, not the float
        /// next to it (serde_json's `float_roundtrip`; without it `1803990227824355.0` was
        /// read as `…355.2`).
        #[test]
        fn a_whole_number_written_as_a_float_is_read_exactly(
            integer in 0u64..(1 << 53),
        ) {
            let mut value: Value = serde_json::from_str(&format!("[{integer}.0]")).unwrap();
            prop_assert!(whole_floats_to_integers(&mut value));
            prop_assert_eq!(value, json!([integer]));
        }

        #[test]
        fn a_converted_number_is_equal_to_the_float(float in any::<f64>()) {
            let mut value = json!(float);
            if whole_floats_to_integers(&mut value) {
                let integer = value.as_i64().map(|n| n as f64).or(value.as_u64().map(|n| n as f64));
                prop_assert_eq!(integer, Some(float));
            } else {
                prop_assert!(!float.is_finite() || float.fract() != 0.0 || float.abs() >= 9.2e18);
            }
        }
    }
}
