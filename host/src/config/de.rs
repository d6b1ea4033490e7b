//! A serde `Deserializer` over the located tree: every error carries the
//! position of the node (or mapping key) it is about.
//!
//! Rules beyond plain serde:
//! - a string target accepts any scalar, as written (`version: 1.10` is
//!   `"1.10"`, not `"1.1"`);
//! - a null (`key:` with nothing after it) is an empty mapping/sequence for
//!   struct, map and list targets, so `workspaces: {dev: }` works;
//! - a number or boolean target accepts a string only if it came from
//!   `${...}` interpolation (`timeout: ${LLM_TIMEOUT:-60}`);
//! - messages about an interpolated string show its `${...}` template, never
//!   the substituted value (which may be a secret).

use std::fmt;

use serde::de::value::StrDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Expected, IntoDeserializer, MapAccess, SeqAccess,
    Unexpected, Visitor,
};

use super::node::{Kind, Node};

/// A deserialization error, located once it passes the node it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeError {
    pub message: String,
    pub pos: Option<(usize, usize)>,
    /// The address of the node (or mapping key) the error is about, so the
    /// loader can leave it out and look for further problems. An identity
    /// only, never dereferenced.
    pub node: Option<usize>,
}

fn address(node: &Node) -> usize {
    std::ptr::from_ref(node) as usize
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            message: msg.to_string(),
            pos: None,
            node: None,
        }
    }

    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        Self::custom(format_args!("wrong type: expected {exp}, found {unexp}"))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Self::custom(format_args!(
            "unknown value `{variant}`, expected one of {}",
            one_of(expected)
        ))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        if expected.is_empty() {
            return Self::custom(format_args!(
                "unknown key `{field}`: no keys are allowed here"
            ));
        }
        let hint = closest(field, expected)
            .map(|best| format!(", did you mean `{best}`?"))
            .unwrap_or_default();
        Self::custom(format_args!(
            "unknown key `{field}`{hint} (expected one of {})",
            one_of(expected)
        ))
    }

    fn missing_field(field: &'static str) -> Self {
        Self::custom(format_args!("missing required key `{field}`"))
    }

    fn duplicate_field(field: &'static str) -> Self {
        Self::custom(format_args!("duplicate key `{field}`"))
    }
}

fn one_of(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The expected name closest to `field`, if it is a plausible typo.
fn closest<'a>(field: &str, expected: &[&'a str]) -> Option<&'a str> {
    let (distance, best) = expected
        .iter()
        .map(|candidate| (crate::suggest::edit_distance(field, candidate), *candidate))
        .min_by_key(|(distance, _)| *distance)?;
    (distance <= field.chars().count().div_ceil(3)).then_some(best)
}

/// Deserializes `T` from `node`. `source` is the YAML text the tree came from.
pub(crate) fn from_node<T: DeserializeOwned>(node: &Node, source: &str) -> Result<T, DeError> {
    T::deserialize(NodeDe { node, source })
}

#[derive(Clone, Copy)]
struct NodeDe<'a> {
    node: &'a Node,
    source: &'a str,
}

impl<'a> NodeDe<'a> {
    /// Gives an error raised for this node its position, and hides an
    /// interpolated value behind its template.
    fn locate<T>(self, result: Result<T, DeError>) -> Result<T, DeError> {
        result.map_err(|mut err| {
            if err.pos.is_none() {
                err.pos = Some(self.node.pos);
                err.node = Some(address(self.node));
                if let Kind::Str {
                    value,
                    template: Some(template),
                } = &self.node.kind
                {
                    err.message = redact(&err.message, value, template);
                }
            }
            err
        })
    }

    fn unexpected(self) -> Unexpected<'a> {
        match &self.node.kind {
            Kind::Null => Unexpected::Other("null"),
            Kind::Bool(b) => Unexpected::Bool(*b),
            Kind::Int(i) => Unexpected::Signed(*i),
            Kind::UInt(u) => Unexpected::Unsigned(*u),
            Kind::Float(f) => Unexpected::Float(*f),
            Kind::Str {
                template: Some(template),
                ..
            } => Unexpected::Str(template),
            Kind::Str { value, .. } => Unexpected::Str(value),
            Kind::Seq(_) => Unexpected::Seq,
            Kind::Map(_) => Unexpected::Map,
        }
    }

    fn wrong_type<T>(self, expected: &dyn Expected) -> Result<T, DeError> {
        Err(<DeError as de::Error>::invalid_type(
            self.unexpected(),
            expected,
        ))
    }

    /// The substituted text of an interpolated string.
    fn interpolated(self) -> Option<&'a str> {
        match &self.node.kind {
            Kind::Str {
                value,
                template: Some(_),
            } => Some(value.trim()),
            _ => None,
        }
    }

    fn number<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            Kind::Int(i) => visitor.visit_i64(*i),
            Kind::UInt(u) => visitor.visit_u64(*u),
            Kind::Float(f) => visitor.visit_f64(*f),
            _ => match self.interpolated() {
                Some(text) => {
                    if let Ok(i) = text.parse::<i64>() {
                        visitor.visit_i64(i)
                    } else if let Ok(u) = text.parse::<u64>() {
                        visitor.visit_u64(u)
                    } else if let Ok(f) = text.parse::<f64>() {
                        visitor.visit_f64(f)
                    } else {
                        self.wrong_type(&visitor)
                    }
                }
                None => self.wrong_type(&visitor),
            },
        };
        self.locate(result)
    }
}

/// Replaces a secret value in an error message by its `${...}` template.
pub(crate) fn redact(message: &str, value: &str, template: &str) -> String {
    if value.is_empty() {
        return message.to_owned();
    }
    let mut message = message
        .replace(&format!("{value:?}"), &format!("{template:?}"))
        .replace(&format!("`{value}`"), &format!("`{template}`"));
    if value.chars().count() >= 6 {
        message = message.replace(value, template);
    }
    message
}

macro_rules! numbers {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            self.number(visitor)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for NodeDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            Kind::Null => visitor.visit_unit(),
            Kind::Bool(b) => visitor.visit_bool(*b),
            Kind::Int(i) => visitor.visit_i64(*i),
            Kind::UInt(u) => visitor.visit_u64(*u),
            Kind::Float(f) => visitor.visit_f64(*f),
            Kind::Str { value, .. } => visitor.visit_str(value),
            Kind::Seq(items) => visitor.visit_seq(SeqDe::new(items, self.source)),
            Kind::Map(entries) => visitor.visit_map(MapDe::new(entries, self.source)),
        };
        self.locate(result)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match (&self.node.kind, self.interpolated()) {
            (Kind::Bool(b), _) => visitor.visit_bool(*b),
            (_, Some("true")) => visitor.visit_bool(true),
            (_, Some("false")) => visitor.visit_bool(false),
            _ => self.wrong_type(&visitor),
        };
        self.locate(result)
    }

    numbers! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match self.node.scalar_text(self.source) {
            Some(text) => visitor.visit_str(&text),
            None => self.wrong_type(&visitor),
        };
        self.locate(result)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = self.wrong_type(&visitor);
        self.locate(result)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            Kind::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        };
        self.locate(result)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            Kind::Null => visitor.visit_unit(),
            _ => self.wrong_type(&visitor),
        };
        self.locate(result)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let result = visitor.visit_newtype_struct(self);
        self.locate(result)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            Kind::Seq(items) => visitor.visit_seq(SeqDe::new(items, self.source)),
            Kind::Null => visitor.visit_seq(SeqDe::new(&[], self.source)),
            _ => self.wrong_type(&visitor),
        };
        self.locate(result)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            Kind::Map(entries) => visitor.visit_map(MapDe::new(entries, self.source)),
            Kind::Null => visitor.visit_map(MapDe::new(&[], self.source)),
            _ => self.wrong_type(&visitor),
        };
        self.locate(result)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let result = match (&self.node.kind, self.node.scalar_text(self.source)) {
            (Kind::Str { .. }, Some(text)) => {
                let variant: StrDeserializer<'_, DeError> = text.as_str().into_deserializer();
                visitor.visit_enum(variant)
            }
            _ => self.wrong_type(&visitor),
        };
        self.locate(result)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }
}

struct SeqDe<'a> {
    items: std::slice::Iter<'a, Node>,
    source: &'a str,
}

impl<'a> SeqDe<'a> {
    fn new(items: &'a [Node], source: &'a str) -> Self {
        SeqDe {
            items: items.iter(),
            source,
        }
    }
}

impl<'de> SeqAccess<'de> for SeqDe<'_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            Some(node) => seed
                .deserialize(NodeDe {
                    node,
                    source: self.source,
                })
                .map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'a> {
    entries: std::slice::Iter<'a, (Node, Node)>,
    value: Option<&'a Node>,
    source: &'a str,
}

impl<'a> MapDe<'a> {
    fn new(entries: &'a [(Node, Node)], source: &'a str) -> Self {
        MapDe {
            entries: entries.iter(),
            value: None,
            source,
        }
    }
}

impl<'de> MapAccess<'de> for MapDe<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        let Some(text) = key.scalar_text(self.source) else {
            return Err(DeError {
                message: "a mapping key must be a string".to_owned(),
                pos: Some(key.pos),
                node: Some(address(key)),
            });
        };
        let key_de: StrDeserializer<'_, DeError> = text.as_str().into_deserializer();
        seed.deserialize(key_de).map(Some).map_err(|mut err| {
            if err.pos.is_none() {
                err.pos = Some(key.pos);
                err.node = Some(address(key));
            }
            err
        })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.value.take() {
            Some(node) => seed.deserialize(NodeDe {
                node,
                source: self.source,
            }),
            None => Err(de::Error::custom("value requested before key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_keys_only() {
        assert_eq!(closest("polices", &["model", "policies"]), Some("policies"));
        assert_eq!(closest("modle", &["model", "policies"]), Some("model"));
        assert_eq!(closest("zzz", &["model", "policies"]), None);
    }

    #[test]
    fn redacts_quoted_and_long_values() {
        assert_eq!(
            redact("unknown value `hunter22`", "hunter22", "${PW}"),
            "unknown value `${PW}`"
        );
        assert_eq!(
            redact("found string \"a\\nb\"", "a\nb", "${PW}"),
            "found string \"${PW}\""
        );
    }
}
