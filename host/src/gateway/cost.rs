//! The price table: USD per million input (prompt) and output (completion)
//! tokens, by model.
//!
//! The built-in entries ([`BUILTIN_PRICES`]) are list prices as known to
//! pincer when it was released; providers change them, so override or
//! extend them in `gateway.prices` (keys are a `provider/model` or a model
//! alias from `gateway.model_list`). Models of the `ollama/` and `local/`
//! providers cost nothing.
//!
//! Lookup for a call to deployment model `provider/name`, requested as
//! `alias`, takes the first hit of:
//! 1. the exact `provider/name` (configured entries win over built-in ones);
//! 2. `name` without the provider prefix, then `name` without a trailing
//!    date snapshot (`-20250514`, `-2024-08-06`) or `-latest`, each first as
//!    a bare key and then under any provider (so `azure/gpt-4o-2024-08-06`
//!    is priced as `openai/gpt-4o`);
//! 3. a free provider (`ollama/`, `local/`): zero;
//! 4. the alias, if configured in `gateway.prices`.
//!
//! No hit means the cost is unknown ([`None`]): the call is recorded with
//! its tokens only, and a workspace with a USD budget refuses it (see
//! [`super::budget`]) rather than spend money it cannot count.

use std::collections::{BTreeMap, HashMap};

use crate::config::ModelPrice;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input_per_1m: f64,
    pub output_per_1m: f64,
}

impl Price {
    pub const FREE: Price = Price {
        input_per_1m: 0.0,
        output_per_1m: 0.0,
    };

    /// The cost in USD of a call with these token counts.
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        let (input, output) = (prompt_tokens as f64, completion_tokens as f64);
        (input * self.input_per_1m + output * self.output_per_1m) / 1_000_000.0
    }
}

impl From<ModelPrice> for Price {
    fn from(p: ModelPrice) -> Self {
        Price {
            input_per_1m: p.input_per_1m,
            output_per_1m: p.output_per_1m,
        }
    }
}

/// Providers whose models are run locally and cost nothing.
pub const FREE_PROVIDERS: [&str; 2] = ["ollama", "local"];

/// List prices as known to pincer (USD per 1M input / output tokens);
/// override in `gateway.prices`.
pub const BUILTIN_PRICES: &[(&str, f64, f64)] = &[
    ("openai/gpt-4o", 2.50, 10.00),
    ("openai/gpt-4o-mini", 0.15, 0.60),
    ("openai/gpt-4.1", 2.00, 8.00),
    ("openai/gpt-4.1-mini", 0.40, 1.60),
    ("openai/gpt-4.1-nano", 0.10, 0.40),
    ("openai/o3-mini", 1.10, 4.40),
    ("openai/o4-mini", 1.10, 4.40),
    ("openai/gpt-3.5-turbo", 0.50, 1.50),
    ("anthropic/claude-3-haiku", 0.25, 1.25),
    ("anthropic/claude-3-5-haiku", 0.80, 4.00),
    ("anthropic/claude-3-5-haiku-latest", 0.80, 4.00),
    ("anthropic/claude-3-5-sonnet", 3.00, 15.00),
    ("anthropic/claude-3-7-sonnet", 3.00, 15.00),
    ("anthropic/claude-sonnet-4", 3.00, 15.00),
    ("anthropic/claude-sonnet-4-0", 3.00, 15.00),
    ("anthropic/claude-opus-4", 15.00, 75.00),
    ("anthropic/claude-opus-4-0", 15.00, 75.00),
    ("anthropic/claude-opus-4-1", 15.00, 75.00),
];

/// Built-in prices plus `gateway.prices`. Cheap to query; build once per
/// configuration.
#[derive(Debug, Clone)]
pub struct PriceTable {
    /// Built-in and configured entries by exact key (configured win).
    exact: HashMap<String, Price>,
    /// Model name without provider prefix -> price, for `provider/name`
    /// keys (configured keys win, then built-in ones in table order).
    by_name: HashMap<String, Price>,
    /// Configured entries only: aliases are looked up here.
    configured: HashMap<String, Price>,
}

impl Default for PriceTable {
    fn default() -> Self {
        Self::builtin()
    }
}

impl PriceTable {
    /// The built-in prices only.
    pub fn builtin() -> Self {
        Self::new(&BTreeMap::new())
    }

    /// The built-in prices, overridden and extended by `gateway.prices`.
    pub fn new(configured: &BTreeMap<String, ModelPrice>) -> Self {
        let mut table = PriceTable {
            exact: HashMap::new(),
            by_name: HashMap::new(),
            configured: HashMap::new(),
        };
        for (key, price) in configured {
            let price = Price::from(*price);
            table.exact.insert(key.clone(), price);
            table.configured.insert(key.clone(), price);
            if let Some((_, name)) = key.split_once('/') {
                table.by_name.entry(name.to_owned()).or_insert(price);
            }
        }
        for &(key, input_per_1m, output_per_1m) in BUILTIN_PRICES {
            let price = Price {
                input_per_1m,
                output_per_1m,
            };
            table.exact.entry(key.to_owned()).or_insert(price);
            if let Some((_, name)) = key.split_once('/') {
                table.by_name.entry(name.to_owned()).or_insert(price);
            }
        }
        table
    }

    /// The price of deployment model `model` (`provider/name` or a bare
    /// name); see the module documentation for the lookup order.
    pub fn price(&self, model: &str) -> Option<Price> {
        self.price_for(model, None)
    }

    /// Like [`Self::price`], falling back to the configured price of the
    /// alias the call was made with.
    pub fn price_for(&self, model: &str, alias: Option<&str>) -> Option<Price> {
        if let Some(price) = self.exact.get(model) {
            return Some(*price);
        }
        let (provider, name) = match model.split_once('/') {
            Some((provider, name)) => (Some(provider), name),
            None => (None, model),
        };
        for candidate in name_candidates(name) {
            if let Some(price) = self.exact.get(candidate).or(self.by_name.get(candidate)) {
                return Some(*price);
            }
        }
        if provider.is_some_and(|p| FREE_PROVIDERS.contains(&p)) {
            return Some(Price::FREE);
        }
        alias.and_then(|a| self.configured.get(a)).copied()
    }

    /// The cost in USD of a call, or `None` when the model has no price.
    pub fn cost(&self, model: &str, prompt_tokens: u64, completion_tokens: u64) -> Option<f64> {
        self.price(model)
            .map(|p| p.cost(prompt_tokens, completion_tokens))
    }

    /// Like [`Self::cost`] with the alias fallback of [`Self::price_for`].
    pub fn cost_for(
        &self,
        model: &str,
        alias: Option<&str>,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) -> Option<f64> {
        self.price_for(model, alias)
            .map(|p| p.cost(prompt_tokens, completion_tokens))
    }
}

/// `name`, then `name` without a date snapshot suffix, then without
/// `-latest`.
fn name_candidates(name: &str) -> impl Iterator<Item = &str> {
    let undated = strip_date(name);
    let unlatest = name.strip_suffix("-latest");
    std::iter::once(name)
        .chain(undated)
        .chain(unlatest)
        .filter(|n| !n.is_empty())
}

/// `gpt-4o-2024-08-06` -> `gpt-4o`, `claude-sonnet-4-20250514` ->
/// `claude-sonnet-4`.
fn strip_date(name: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // -YYYYMMDD
    if let Some((base, tail)) = name.rsplit_once('-')
        && tail.len() == 8
        && digits(tail)
    {
        return Some(base);
    }
    // -YYYY-MM-DD
    let mut parts = name.rsplitn(4, '-');
    let (day, month, year, base) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    (year.len() == 4
        && month.len() == 2
        && day.len() == 2
        && digits(year)
        && digits(month)
        && digits(day))
    .then_some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn builtin_prices_and_cost() {
        let table = PriceTable::builtin();
        let p = table.price("openai/gpt-4o").unwrap();
        assert_eq!((p.input_per_1m, p.output_per_1m), (2.5, 10.0));
        // 1M in + 1M out of gpt-4o-mini
        assert!(close(
            table
                .cost("openai/gpt-4o-mini", 1_000_000, 1_000_000)
                .unwrap(),
            0.75
        ));
        assert!(close(
            table.cost("anthropic/claude-opus-4", 1000, 2000).unwrap(),
            0.015 + 0.15
        ));
        assert!(close(table.cost("openai/gpt-4.1", 0, 0).unwrap(), 0.0));
        for (model, input, output) in BUILTIN_PRICES {
            assert_eq!(
                table.price(model),
                Some(Price {
                    input_per_1m: *input,
                    output_per_1m: *output
                }),
                "{model}"
            );
        }
    }

    #[test]
    fn lookup_without_provider_and_snapshot_suffixes() {
        let table = PriceTable::builtin();
        let mini = table.price("openai/gpt-4o-mini");
        assert_eq!(table.price("gpt-4o-mini"), mini);
        assert_eq!(table.price("azure/gpt-4o-mini"), mini);
        assert_eq!(table.price("openai/gpt-4o-mini-2024-07-18"), mini);
        assert_eq!(
            table.price("openai_compatible/gpt-4o-2024-08-06"),
            table.price("openai/gpt-4o")
        );
        let sonnet = table.price("anthropic/claude-sonnet-4");
        assert_eq!(table.price("anthropic/claude-sonnet-4-20250514"), sonnet);
        assert_eq!(table.price("anthropic/claude-3-7-sonnet-latest"), sonnet);
        assert_eq!(table.price("claude-3-7-sonnet-20250219"), sonnet);
        assert_eq!(
            table.price("anthropic/claude-3-5-haiku-20241022"),
            table.price("anthropic/claude-3-5-haiku-latest")
        );
        // not a date: stays unknown
        assert_eq!(table.price("openai/gpt-4o-12"), None);
    }

    #[test]
    fn local_providers_are_free_and_unknown_models_unpriced() {
        let table = PriceTable::builtin();
        assert_eq!(table.cost("ollama/llama3.2", 5000, 5000), Some(0.0));
        assert_eq!(table.cost("local/anything", 1, 1), Some(0.0));
        assert_eq!(table.cost("openai_compatible/deepseek-chat", 10, 10), None);
        assert_eq!(table.cost("mystery", 10, 10), None);
        assert_eq!(table.cost("", 10, 10), None);
        assert_eq!(table.cost("openai/", 10, 10), None);
    }

    #[test]
    fn configured_prices_override_extend_and_price_aliases() {
        let configured = BTreeMap::from([
            (
                "openai/gpt-4o".to_owned(),
                ModelPrice {
                    input_per_1m: 1.0,
                    output_per_1m: 2.0,
                },
            ),
            (
                "openai_compatible/deepseek-chat".to_owned(),
                ModelPrice {
                    input_per_1m: 0.27,
                    output_per_1m: 1.10,
                },
            ),
            (
                "house".to_owned(),
                ModelPrice {
                    input_per_1m: 4.0,
                    output_per_1m: 8.0,
                },
            ),
            (
                "ollama/big".to_owned(),
                ModelPrice {
                    input_per_1m: 0.5,
                    output_per_1m: 0.5,
                },
            ),
        ]);
        let table = PriceTable::new(&configured);
        assert!(close(
            table.cost("openai/gpt-4o", 1_000_000, 1_000_000).unwrap(),
            3.0
        ));
        // the override also applies to other providers serving the model
        assert_eq!(table.price("azure/gpt-4o"), table.price("openai/gpt-4o"));
        assert_eq!(
            table.price("deepseek-chat").map(|p| p.input_per_1m),
            Some(0.27)
        );
        // untouched built-ins remain
        assert_eq!(
            table.price("openai/gpt-4o-mini").map(|p| p.input_per_1m),
            Some(0.15)
        );
        // alias fallback: only for models without a price of their own
        assert_eq!(table.price("vllm/my-model"), None);
        assert!(close(
            table
                .cost_for("vllm/my-model", Some("house"), 1_000_000, 0)
                .unwrap(),
            4.0
        ));
        assert_eq!(
            table.price_for("openai/gpt-4o-mini", Some("house")),
            table.price("openai/gpt-4o-mini")
        );
        assert_eq!(table.cost_for("vllm/my-model", Some("nope"), 1, 1), None);
        // a configured exact price beats the free-provider rule
        assert!(close(table.cost("ollama/big", 1_000_000, 0).unwrap(), 0.5));
        assert_eq!(table.cost("ollama/small", 1_000_000, 0), Some(0.0));
    }

    #[test]
    fn date_suffixes() {
        assert_eq!(strip_date("gpt-4o-2024-08-06"), Some("gpt-4o"));
        assert_eq!(strip_date("claude-opus-4-20250514"), Some("claude-opus-4"));
        assert_eq!(strip_date("gpt-4o"), None);
        assert_eq!(strip_date("2024-08-06"), None);
        assert_eq!(strip_date("a-2024-8-06"), None);
        assert_eq!(strip_date("a-1234567"), None);
    }
}
