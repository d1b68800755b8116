//! Inline values, bounded: a HelmApp's `values` is any object its author
//! writes, and the apiserver stores objects nested thousands of levels
//! deep. A decoder that fails on one (serde_json stops at 128 levels) would
//! fail the LIST page and the watch event that carry it — every HelmApp's,
//! not just its own — and a tree that deep overflows a stack when it is
//! walked or dropped. So values are decoded to [`MAX_VALUES_DEPTH`] levels;
//! a container below that is kept empty (its content skipped without
//! recursion), which leaves the tree one level too deep: [`depth`] tells,
//! and delivery refuses it (`InvalidValues`) without running helm.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The deepest `spec.values` delivery accepts: the root object is level 1.
pub const MAX_VALUES_DEPTH: usize = 64;

/// `values` decoded as [`serde_json::Value`], containers past
/// [`MAX_VALUES_DEPTH`] kept empty (see the module docs).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    struct Optional;
    impl<'de> Visitor<'de> for Optional {
        type Value = Option<Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("values")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            Bounded { level: 1 }.deserialize(d).map(Some)
        }
    }
    d.deserialize_option(Optional)
}

/// How deep `v` is: a scalar 0, a container one more than its deepest
/// child. Walked without recursion.
pub fn depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(a) => Box::new(a.iter()),
            Value::Object(m) => Box::new(m.values()),
            _ => continue,
        };
        deepest = deepest.max(level);
        stack.extend(children.map(|c| (c, level + 1)));
    }
    deepest
}

/// Decodes a value whose outermost container would be at `level`.
struct Bounded {
    level: usize,
}

impl<'de> DeserializeSeed<'de> for Bounded {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        if self.level > MAX_VALUES_DEPTH {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Value::Array(out));
        }
        let level = self.level + 1;
        while let Some(v) = seq.next_element_seed(Bounded { level })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        if self.level > MAX_VALUES_DEPTH {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Value::Object(out));
        }
        let level = self.level + 1;
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(Bounded { level })?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{"a":{"a":…{"a":1}…}}` with `levels` objects.
    fn nested(levels: usize) -> String {
        format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels))
    }

    #[derive(serde::Deserialize)]
    struct Holder {
        #[serde(default, deserialize_with = "deserialize")]
        values: Option<Value>,
    }

    fn decode(values: &str) -> Option<Value> {
        let doc = format!(r#"{{"spec":{{"values":{values}}},"next":1}}"#);
        #[derive(serde::Deserialize)]
        struct Outer {
            spec: Holder,
        }
        serde_json::from_str::<Outer>(&doc).unwrap().spec.values
    }

    #[test]
    fn values_within_the_bound_are_kept_as_written() {
        let v = decode(&nested(MAX_VALUES_DEPTH)).unwrap();
        assert_eq!(depth(&v), MAX_VALUES_DEPTH);
        assert_eq!(
            v,
            serde_json::from_str::<Value>(&nested(MAX_VALUES_DEPTH)).unwrap()
        );
        assert_eq!(decode("null"), None);
        let mixed = r#"{"l":[1,"x",{"k":true}],"f":1.5,"n":null}"#;
        assert_eq!(
            decode(mixed).unwrap(),
            serde_json::from_str::<Value>(mixed).unwrap()
        );
    }

    #[test]
    fn values_past_the_bound_decode_and_say_they_are_too_deep() {
        // 200 levels: serde_json alone refuses past 128; 100,000 would
        // overflow a stack when walked.
        for levels in [MAX_VALUES_DEPTH + 1, 200, 100_000] {
            let v = decode(&nested(levels)).unwrap();
            assert_eq!(depth(&v), MAX_VALUES_DEPTH + 1, "{levels} levels");
        }
        let lists = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(depth(&decode(&lists).unwrap()), MAX_VALUES_DEPTH + 1);
    }
}
