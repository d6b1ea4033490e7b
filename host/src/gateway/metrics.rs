//! Prometheus metrics at `GET /metrics`, in the text exposition format,
//! served on the gateway's TCP listener only ([`super::Gateway::tcp_routes`]):
//! never on a workspace's unix socket, so no container reads other
//! workspaces' figures.
//!
//! Counted as requests are served (`prometheus-client` families):
//! - `pincer_gateway_requests_total{workspace, model, outcome}`: outcome is
//!   `ok`, `cached`, `denied` (model not allowed, budget), or `error`
//!   (the upstream failed);
//! - `pincer_gateway_added_latency_seconds{endpoint}`: the time a request
//!   spent in pincer, that is its whole time minus the upstream's;
//! - `pincer_gateway_tokens_total{workspace, model, kind}` and
//!   `pincer_gateway_cost_usd_total{workspace, model}`;
//! - the process's own counters ([`crate::events`]): container starts and
//!   verify failures, plugin faults, channel reconnects.
//!
//! Read from the database at each scrape (a few indexed counts):
//! - `pincer_budget_remaining_usd` / `_tokens{workspace, window}` for each
//!   workspace with such a limit;
//! - `pincer_outbox_pending{channel}`, `pincer_schedule_runs{status}`,
//!   `pincer_turns{status}` (what the daemon has done; zero without one).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    workspace: String,
    model: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    workspace: String,
    model: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    workspace: String,
    model: String,
}

type CostCounter = Counter<f64, std::sync::atomic::AtomicU64>;

/// How a request ended, for `outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Cached,
    Denied,
    Error,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Cached => "cached",
            Outcome::Denied => "denied",
            Outcome::Error => "error",
        }
    }
}

/// The gateway's live metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    added_latency: Family<EndpointLabels, Histogram>,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<ModelLabels, CostCounter>,
    state: crate::db::Location,
    /// On PostgreSQL, the pool scrapes read through, opened at the first
    /// scrape that reaches the server (not one pool per query).
    postgres: std::sync::Mutex<Option<Arc<crate::db::Db>>>,
}

fn added_latency_histogram() -> Histogram {
    // 50 µs to ~1.6 s
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl Metrics {
    /// Metrics whose scrape-time figures come from the state at `state`.
    pub fn new(state: crate::db::Location) -> Arc<Metrics> {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "pincer_gateway_requests",
            "Model requests by workspace, model alias and outcome",
            requests.clone(),
        );
        let added_latency = Family::<EndpointLabels, Histogram>::new_with_constructor(
            added_latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "pincer_gateway_added_latency_seconds",
            "Time a request spent in pincer: its whole time minus the upstream's",
            added_latency.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "pincer_gateway_tokens",
            "Tokens by workspace, model alias and kind (prompt, completion)",
            tokens.clone(),
        );
        let cost = Family::<ModelLabels, CostCounter>::default();
        registry.register(
            "pincer_gateway_cost_usd",
            "Cost in USD by workspace and model alias (where a price is known)",
            cost.clone(),
        );
        crate::events::register(&mut registry);
        Arc::new(Metrics {
            registry,
            requests,
            added_latency,
            tokens,
            cost,
            state,
            postgres: std::sync::Mutex::default(),
        })
    }

    /// One request's end.
    pub fn request(&self, workspace: &str, model: &str, outcome: Outcome) {
        self.requests
            .get_or_create(&RequestLabels {
                workspace: workspace.to_owned(),
                model: model.to_owned(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// The time a request spent in pincer (`endpoint`: `chat` or `messages`).
    pub fn added_latency(&self, endpoint: &'static str, added: Duration) {
        self.added_latency
            .get_or_create(&EndpointLabels { endpoint })
            .observe(added.as_secs_f64());
    }

    /// Tokens and cost of one answered request.
    pub fn usage(
        &self,
        workspace: &str,
        model: &str,
        prompt: u64,
        completion: u64,
        cost: Option<f64>,
    ) {
        for (kind, n) in [("prompt", prompt), ("completion", completion)] {
            self.tokens
                .get_or_create(&TokenLabels {
                    workspace: workspace.to_owned(),
                    model: model.to_owned(),
                    kind,
                })
                .inc_by(n);
        }
        if let Some(cost) = cost.filter(|c| c.is_finite() && *c > 0.0) {
            self.cost
                .get_or_create(&ModelLabels {
                    workspace: workspace.to_owned(),
                    model: model.to_owned(),
                })
                .inc_by(cost);
        }
    }

    /// The exposition text: the live families, then the figures read from
    /// the database now. `budgets`: each workspace's limits and spend.
    pub fn render(
        &self,
        budgets: &[(String, crate::config::Budget, super::budget::Spend)],
    ) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            return String::new();
        }
        // `encode` ends with `# EOF`, which must stay last.
        let body = out
            .trim_end()
            .strip_suffix("# EOF")
            .unwrap_or(&out)
            .to_owned();
        let mut out = body;
        let mut gauge = |name: &str, help: &str, rows: Vec<(String, f64)>| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
            for (labels, value) in rows {
                out.push_str(&format!("{name}{{{labels}}} {value}\n"));
            }
        };
        let mut usd = Vec::new();
        let mut tokens = Vec::new();
        for (workspace, budget, spend) in budgets {
            let ws = escape(workspace);
            let left = |limit: f64, spent: f64| (limit - spent).max(0.0);
            if let Some(limit) = budget.daily_usd {
                usd.push((
                    format!("workspace=\"{ws}\",window=\"day\""),
                    left(limit, spend.day_usd),
                ));
            }
            if let Some(limit) = budget.monthly_usd {
                usd.push((
                    format!("workspace=\"{ws}\",window=\"month\""),
                    left(limit, spend.month_usd),
                ));
            }
            if let Some(limit) = budget.daily_tokens {
                tokens.push((
                    format!("workspace=\"{ws}\",window=\"day\""),
                    left(limit as f64, spend.day_tokens as f64),
                ));
            }
            if let Some(limit) = budget.monthly_tokens {
                tokens.push((
                    format!("workspace=\"{ws}\",window=\"month\""),
                    left(limit as f64, spend.month_tokens as f64),
                ));
            }
        }
        gauge(
            "pincer_budget_remaining_usd",
            "USD left in the budget window",
            usd,
        );
        gauge(
            "pincer_budget_remaining_tokens",
            "Tokens left in the budget window",
            tokens,
        );
        let counts = |sql: &str, label: &str| -> Vec<(String, f64)> {
            self.counts(sql)
                .into_iter()
                .map(|(key, n)| (format!("{label}=\"{}\"", escape(&key)), n as f64))
                .collect()
        };
        gauge(
            "pincer_outbox_pending",
            "Replies waiting in the outbox, by channel",
            counts(
                "SELECT channel, COUNT(*) FROM channel_outbox WHERE state = 'pending' GROUP BY channel",
                "channel",
            ),
        );
        gauge(
            "pincer_schedule_runs",
            "Scheduled runs recorded, by status",
            counts(
                "SELECT status, COUNT(*) FROM schedule_runs GROUP BY status",
                "status",
            ),
        );
        gauge(
            "pincer_turns",
            "Agent turns recorded, by status",
            counts(
                "SELECT status, COUNT(*) FROM turns GROUP BY status",
                "status",
            ),
        );
        out.push_str("# EOF\n");
        out
    }
}

impl Metrics {
    /// (key, count) rows of a `SELECT key, COUNT(*) … GROUP BY key`; none
    /// when the state cannot be read or the table does not exist yet. A
    /// SQLite file is opened read-only, so a scrape never creates or
    /// changes it.
    fn counts(&self, sql: &str) -> Vec<(String, i64)> {
        match &self.state {
            crate::db::Location::Sqlite(path) => {
                let Ok(conn) = rusqlite::Connection::open_with_flags(
                    path,
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
                ) else {
                    return Vec::new();
                };
                let Ok(mut stmt) = conn.prepare(sql) else {
                    return Vec::new();
                };
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map(|rows| rows.flatten().collect())
                    .unwrap_or_default()
            }
            at @ crate::db::Location::Postgres(_) => self
                .postgres_pool(at)
                .and_then(|db| {
                    db.run(|conn| {
                        conn.query(sql, &[])?
                            .iter()
                            .map(|r| Ok((r.get(0)?, r.get(1)?)))
                            .collect()
                    })
                })
                .unwrap_or_default(),
        }
    }

    fn postgres_pool(
        &self,
        at: &crate::db::Location,
    ) -> Result<Arc<crate::db::Db>, crate::db::DbError> {
        let mut pool = self
            .postgres
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(db) = pool.as_ref() {
            return Ok(db.clone());
        }
        let db = Arc::new(crate::db::Db::open(at)?);
        *pool = Some(db.clone());
        Ok(db)
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_render_as_prometheus_text() {
        let dir = tempfile::tempdir().expect("dir");
        let metrics = Metrics::new(crate::db::Location::Sqlite(dir.path().join("none.db")));
        metrics.request("team", "default", Outcome::Ok);
        metrics.request("team", "default", Outcome::Ok);
        metrics.request("team", "default", Outcome::Denied);
        metrics.usage("team", "default", 10, 5, Some(0.25));
        metrics.added_latency("chat", Duration::from_micros(300));
        let budget = crate::config::Budget {
            daily_usd: Some(1.0),
            ..Default::default()
        };
        let spend = super::super::budget::Spend {
            day_usd: 0.25,
            day_tokens: 15,
            month_usd: 0.25,
            month_tokens: 15,
            reserved_usd: 0.0,
            reserved_tokens: 0,
        };
        let text = metrics.render(&[("team\"x".into(), budget, spend)]);
        assert!(
            text.contains(
                "pincer_gateway_requests_total{workspace=\"team\",model=\"default\",outcome=\"ok\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains("pincer_gateway_tokens_total{workspace=\"team\",model=\"default\",kind=\"completion\"} 5"), "{text}");
        assert!(
            text.contains("pincer_gateway_added_latency_seconds_count{endpoint=\"chat\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "pincer_budget_remaining_usd{workspace=\"team\\\"x\",window=\"day\"} 0.75"
            ),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1);
    }
}
