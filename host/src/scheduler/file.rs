//! `schedules.yaml`: the typed file and its checks.
//!
//! The file is parsed by the same located-YAML machinery as `pincer.yaml`
//! ([`crate::config::parse_located`]), without `${NAME}` interpolation: a
//! schedule holds no secrets, and its values are taken as written. Every
//! error, structural or semantic, is `FILE:LINE:COLUMN: message` at the
//! offending node.
//!
//! ```yaml
//! tasks:
//!   - id: morning_briefing
//!     schedule: "0 9 * * *"        # or every: 2h, or at: 2026-12-24T09:00
//!     timezone: Asia/Shanghai
//!     skill: generate_daily_report # or prompt: "..."
//!     skill_input: {template: executive_summary}
//!     deliver_to: ["channel:team-chat"]
//!     catch_up: once               # skip | once | all
//!     overlap: skip                # skip | queue
//!     timeout: 10m
//!     # a prompt task may name who decides its calls that need a person:
//!     # approvals: {ask_in: "channel:team-chat", approvers: [U012ABCDEF]}
//! ```

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use crate::config::{
    ConfigError, Document, Seg, SkillReference, ToolName, is_valid_name, parse_located,
};

sentence_error! {
    /// Why a value in a task is not valid, said for a person (the loader adds
    /// where it was written).
    pub struct Invalid;
}

/// The file name looked up in each workspace's configuration folder.
pub const FILE_NAME: &str = "schedules.yaml";

/// The default `timeout:` of a task.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// What happens to due times missed while the daemon was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// None of the missed runs.
    Skip,
    /// The latest missed run only.
    #[default]
    Once,
    /// Every missed run, oldest first, at most [`super::plan::MAX_CATCH_UP`].
    All,
}

/// What happens when a task is due while its previous run is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// The new due time is recorded as skipped.
    #[default]
    Skip,
    /// The new due time waits until the previous run ends.
    Queue,
}

/// When a task fires.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// A cron expression (5 or 6 fields, or `@daily` and friends) read in the
    /// task's zone; `expr` is the text as written.
    Cron { cron: Box<Cron>, expr: String },
    /// Every `interval`, at the multiples of it since the Unix epoch (UTC).
    Every(Duration),
    /// Once, at this instant.
    At(DateTime<Utc>),
}

/// What a run does. Running it is the daemon's job.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A skill call: `skill` is a plugin (then `tool` picks one of its tools)
    /// or a tool name such as `skill-calc__evaluate`.
    Skill {
        skill: String,
        tool: Option<String>,
        input: serde_json::Value,
    },
    /// An agent turn in the workspace with this message.
    Prompt(String),
}

/// Where a run's output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub channel: String,
    pub conversation: Option<String>,
    pub thread: Option<String>,
}

/// Who decides a scheduled turn's calls that need a person, and where
/// they are asked (`approvals:` of a prompt task). Without it, nobody is
/// asked and `approvals.unattended` of the workspace decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asking {
    /// The conversation the request is posted in, and where it is decided.
    pub ask_in: Delivery,
    /// The sender ids of that channel who may decide.
    pub approvers: Vec<String>,
}

/// One checked task of a `schedules.yaml`.
#[derive(Debug, Clone)]
pub struct Task {
    pub id: String,
    pub description: Option<String>,
    pub trigger: Trigger,
    pub zone: Tz,
    pub action: Action,
    pub deliver_to: Vec<Delivery>,
    pub catch_up: CatchUp,
    pub overlap: Overlap,
    pub timeout: Duration,
    pub rerun_interrupted: bool,
    /// Who is asked when the task's turn needs a decision.
    pub approvals: Option<Asking>,
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Cron { expr, .. } => write!(f, "schedule {expr:?}"),
            Trigger::Every(every) => write!(f, "every {}", humantime::format_duration(*every)),
            Trigger::At(at) => write!(f, "at {}", at.to_rfc3339()),
        }
    }
}

/// Checks a skill name; the error text is shown as is.
pub type SkillCheck<'a> = &'a dyn Fn(&str) -> Result<(), String>;

/// What the checks may consult beyond the file itself.
pub struct Checks<'a> {
    /// The zone of tasks without `timezone:`.
    pub default_zone: Tz,
    /// The channels `deliver_to` may name; `None` skips the check.
    pub channels: Option<&'a BTreeSet<String>>,
    /// The channels without a default conversation: `channel:NAME` cannot
    /// deliver to them.
    pub without_default: Option<&'a BTreeSet<String>>,
    /// Checks a skill name (`plugin`, or `plugin__tool` when `tool:` is
    /// given); `None` skips the check. The error text is shown as is.
    pub skill: Option<SkillCheck<'a>>,
    /// The tools of skill plugins by plugin name, or why they could not be
    /// listed: a named tool must be one of them, and a task naming only
    /// the plugin gets its only tool. A plugin not in the map is not
    /// checked.
    pub tools: Option<&'a BTreeMap<String, Result<Vec<String>, String>>>,
}

impl Checks<'_> {
    /// No channel or skill checks; tasks without `timezone:` use `zone`.
    pub fn offline(zone: Tz) -> Checks<'static> {
        Checks {
            default_zone: zone,
            channels: None,
            without_default: None,
            skill: None,
            tools: None,
        }
    }
}

/// The host's IANA time zone (`TZ`, else the system's), else UTC.
pub fn host_zone() -> Tz {
    std::env::var("TZ")
        .ok()
        .and_then(|name| Tz::from_str(name.trim_start_matches(':')).ok())
        .or_else(|| {
            iana_time_zone::get_timezone()
                .ok()
                .and_then(|name| Tz::from_str(&name).ok())
        })
        .unwrap_or(Tz::UTC)
}

/// Reads and checks the file at `path`.
///
/// # Errors
/// [`ConfigError::Read`], or as [`parse`].
pub fn load(path: &Path, checks: &Checks<'_>) -> Result<Vec<Task>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        file: path.display().to_string(),
        source,
    })?;
    parse(&text, path, checks)
}

/// Parses and checks `text`; `file` is only used in messages. An empty file
/// has no tasks.
///
/// # Errors
/// The first problem, located: [`ConfigError::Syntax`], [`ConfigError::Schema`]
/// (unknown key, wrong type, missing `id`) or [`ConfigError::Invalid`] (the
/// checks listed in the module docs).
pub fn parse(text: &str, file: &Path, checks: &Checks<'_>) -> Result<Vec<Task>, ConfigError> {
    parse_tasks(text, file, checks, false)
}

/// One task given as a JSON object (a task the agent proposes, whose id
/// must carry [`super::agent::ID_PREFIX`]), checked as in a file.
///
/// # Errors
/// As [`parse`], located in the one-line JSON text.
pub fn parse_one(
    spec: &serde_json::Value,
    label: &Path,
    checks: &Checks<'_>,
    agent: bool,
) -> Result<Task, ConfigError> {
    let text = serde_json::json!({ "tasks": [spec] }).to_string();
    let mut tasks = parse_tasks(&text, label, checks, agent)?;
    Ok(tasks.remove(0))
}

fn parse_tasks(
    text: &str,
    file: &Path,
    checks: &Checks<'_>,
    agent: bool,
) -> Result<Vec<Task>, ConfigError> {
    let (raw, doc): (RawFile, Document<'_>) = parse_located(text, file)?;
    let mut seen = HashSet::new();
    let mut tasks = Vec::with_capacity(raw.tasks.len());
    for (index, raw_task) in raw.tasks.into_iter().enumerate() {
        let at = TaskSite { doc: &doc, index };
        if !seen.insert(raw_task.id.clone()) {
            return Err(at.invalid("id", &format!("duplicate task id `{}`", raw_task.id)));
        }
        if raw_task.id.starts_with(super::agent::ID_PREFIX) != agent {
            let message = if agent {
                format!(
                    "an agent task's id starts with `{}`",
                    super::agent::ID_PREFIX
                )
            } else {
                format!(
                    "task ids starting with `{}` are kept for tasks the agent schedules (pincer schedule list shows them): choose another id",
                    super::agent::ID_PREFIX
                )
            };
            return Err(at.invalid("id", &message));
        }
        tasks.push(check_task(raw_task, &at, checks)?);
    }
    Ok(tasks)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    tasks: Vec<RawTask>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    id: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    schedule: Option<String>,
    #[serde(default)]
    every: Option<String>,
    #[serde(default)]
    at: Option<String>,
    #[serde(default)]
    timezone: Option<String>,
    #[serde(default)]
    skill: Option<String>,
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    skill_input: Option<serde_json::Value>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    deliver_to: Vec<RawDelivery>,
    #[serde(default)]
    catch_up: CatchUp,
    #[serde(default)]
    overlap: Overlap,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    rerun_interrupted: bool,
    #[serde(default)]
    approvals: Option<RawAsking>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAsking {
    ask_in: RawDelivery,
    approvers: Vec<String>,
}

/// `channel:NAME` or `{channel, conversation, thread}`.
#[derive(Debug)]
struct RawDelivery(Delivery);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveryMap {
    channel: String,
    #[serde(default)]
    conversation: Option<String>,
    #[serde(default)]
    thread: Option<String>,
}

impl<'de> Deserialize<'de> for RawDelivery {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DeliveryVisitor;
        impl<'de> Visitor<'de> for DeliveryVisitor {
            type Value = RawDelivery;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`channel:NAME` or {channel, conversation, thread}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawDelivery, E> {
                match v.split_once(':') {
                    Some(("channel", name)) if !name.is_empty() => Ok(RawDelivery(Delivery {
                        channel: name.to_owned(),
                        conversation: None,
                        thread: None,
                    })),
                    _ => Err(E::custom(format_args!(
                        "invalid delivery `{v}`: expected `channel:NAME` or \
                         {{channel, conversation, thread}}"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawDelivery, A::Error> {
                let m = DeliveryMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawDelivery(Delivery {
                    channel: m.channel,
                    conversation: m.conversation,
                    thread: m.thread,
                }))
            }
        }
        deserializer.deserialize_any(DeliveryVisitor)
    }
}

/// Locates semantic errors inside `tasks[index]`.
struct TaskSite<'d, 't> {
    doc: &'d Document<'t>,
    index: usize,
}

impl TaskSite<'_, '_> {
    fn invalid(&self, key: &str, message: &str) -> ConfigError {
        self.doc.invalid(
            &[Seg::Key("tasks"), Seg::Index(self.index), Seg::Key(key)],
            false,
            message,
        )
    }

    fn invalid_at(&self, path: &[Seg<'_>], at_key: bool, message: &str) -> ConfigError {
        let mut full = vec![Seg::Key("tasks"), Seg::Index(self.index)];
        full.extend_from_slice(path);
        self.doc.invalid(&full, at_key, message)
    }

    /// The task's mapping itself (for a missing key).
    fn task(&self, message: &str) -> ConfigError {
        self.invalid_at(&[], false, message)
    }
}

fn check_task(
    raw: RawTask,
    at: &TaskSite<'_, '_>,
    checks: &Checks<'_>,
) -> Result<Task, ConfigError> {
    if !is_valid_name(&raw.id) {
        return Err(at.invalid(
            "id",
            &format!(
                "invalid task id `{}`: use 1-63 characters from a-z, 0-9, `_` and `-`, \
                 starting with a letter or digit",
                raw.id
            ),
        ));
    }

    let zone = match &raw.timezone {
        Some(name) => Tz::from_str(name).map_err(|_| {
            at.invalid(
                "timezone",
                &format!("unknown time zone `{name}` (use an IANA name such as Europe/Berlin)"),
            )
        })?,
        None => checks.default_zone,
    };

    let trigger = match (&raw.schedule, &raw.every, &raw.at) {
        (Some(expr), None, None) => Trigger::Cron {
            cron: Box::new(parse_cron(expr).map_err(|m| at.invalid("schedule", &m.0))?),
            expr: expr.clone(),
        },
        (None, Some(every), None) => {
            Trigger::Every(parse_every(every).map_err(|m| at.invalid("every", &m.0))?)
        }
        (None, None, Some(when)) => {
            Trigger::At(parse_at(when, zone).map_err(|m| at.invalid("at", &m.0))?)
        }
        (None, None, None) => {
            return Err(at.task("a task needs one of `schedule`, `every` or `at`"));
        }
        _ => {
            let second = if raw.schedule.is_some() && raw.every.is_some() {
                "every"
            } else {
                "at"
            };
            return Err(at.invalid_at(
                &[Seg::Key(second)],
                true,
                "give only one of `schedule`, `every` and `at`",
            ));
        }
    };

    let action = match (raw.skill, raw.prompt) {
        (Some(skill), None) => {
            if skill.is_empty() {
                return Err(at.invalid("skill", "`skill` is empty"));
            }
            if let Some(tool) = &raw.tool {
                if let Some(ToolName {
                    plugin,
                    tool: named,
                }) = ToolName::parse(&skill)
                {
                    return Err(at.invalid(
                        "tool",
                        &format!(
                            "`skill: {skill}` already names tool `{named}` of `{plugin}`: \
                             drop `tool:`, or write `skill: {plugin}` and `tool: {tool}`"
                        ),
                    ));
                }
                if tool.is_empty() {
                    return Err(at.invalid("tool", "`tool` is empty"));
                }
            }
            let key = if raw.tool.is_some() { "tool" } else { "skill" };
            if let Some(check) = checks.skill {
                let name = match &raw.tool {
                    Some(tool) => ToolName::new(&skill, tool).to_string(),
                    None => skill.clone(),
                };
                check(&name).map_err(|m| at.invalid(key, &m))?;
            }
            let tool =
                resolve_tool(&skill, raw.tool, checks.tools).map_err(|m| at.invalid(key, &m.0))?;
            Action::Skill {
                skill,
                tool,
                input: raw.skill_input.unwrap_or(serde_json::Value::Null),
            }
        }
        (None, Some(prompt)) => {
            if raw.tool.is_some() || raw.skill_input.is_some() {
                let key = if raw.tool.is_some() {
                    "tool"
                } else {
                    "skill_input"
                };
                return Err(at.invalid_at(
                    &[Seg::Key(key)],
                    true,
                    &format!("`{key}` belongs to a `skill` task; a `prompt` task takes none"),
                ));
            }
            if prompt.trim().is_empty() {
                return Err(at.invalid("prompt", "`prompt` is empty"));
            }
            Action::Prompt(prompt)
        }
        (None, None) => return Err(at.task("a task needs one of `skill` or `prompt`")),
        (Some(_), Some(_)) => {
            return Err(at.invalid_at(
                &[Seg::Key("prompt")],
                true,
                "give only one of `skill` and `prompt`",
            ));
        }
    };

    let mut deliver_to = Vec::with_capacity(raw.deliver_to.len());
    for (i, RawDelivery(delivery)) in raw.deliver_to.into_iter().enumerate() {
        check_destination(&delivery, checks)
            .map_err(|m| at.invalid_at(&[Seg::Key("deliver_to"), Seg::Index(i)], false, &m.0))?;
        deliver_to.push(delivery);
    }

    let approvals = match raw.approvals {
        None => None,
        Some(_) if !matches!(action, Action::Prompt(_)) => {
            return Err(at.invalid_at(
                &[Seg::Key("approvals")],
                true,
                "`approvals` belongs to a `prompt` task: a skill call asks nobody",
            ));
        }
        Some(RawAsking {
            ask_in: RawDelivery(ask_in),
            approvers,
        }) => {
            check_destination(&ask_in, checks).map_err(|m| {
                at.invalid_at(&[Seg::Key("approvals"), Seg::Key("ask_in")], false, &m.0)
            })?;
            if approvers.is_empty() || approvers.iter().any(|a| a.trim().is_empty()) {
                return Err(at.invalid_at(
                    &[Seg::Key("approvals"), Seg::Key("approvers")],
                    false,
                    "`approvers` lists the sender ids (of the `ask_in` channel) who may \
                     decide: give at least one, none empty",
                ));
            }
            Some(Asking { ask_in, approvers })
        }
    };

    let timeout = match &raw.timeout {
        Some(text) => parse_duration(text).map_err(|m| at.invalid("timeout", &m.0))?,
        None => DEFAULT_TIMEOUT,
    };

    Ok(Task {
        id: raw.id,
        description: raw.description,
        trigger,
        zone,
        action,
        deliver_to,
        catch_up: raw.catch_up,
        overlap: raw.overlap,
        timeout,
        rerun_interrupted: raw.rerun_interrupted,
        approvals,
    })
}

/// Whether `to` names a channel the checks know, with a conversation.
fn check_destination(to: &Delivery, checks: &Checks<'_>) -> Result<(), Invalid> {
    if let Some(channels) = checks.channels
        && !channels.contains(&to.channel)
    {
        return Err(Invalid(format!("unknown channel `{}`", to.channel)));
    }
    if to.conversation.is_none()
        && checks
            .without_default
            .is_some_and(|without| without.contains(&to.channel))
    {
        let name = &to.channel;
        return Err(Invalid(format!(
            "channel `{name}` has no default conversation: set \
             channels.{name}.default_conversation or write \
             {{channel: {name}, conversation: ID}}"
        )));
    }
    Ok(())
}

/// The tool a skill task calls: as written when `checks` has no tool list
/// for its plugin; else a tool the plugin has, its only one when none is
/// named. `None` when `skill` names the tool itself (`plugin__tool`).
fn resolve_tool(
    skill: &str,
    tool: Option<String>,
    tools: Option<&BTreeMap<String, Result<Vec<String>, String>>>,
) -> Result<Option<String>, Invalid> {
    let reference = SkillReference::parse(skill);
    let (plugin, named) = (reference.plugin, reference.tool.or(tool.as_deref()));
    let listed = match tools.and_then(|tools| tools.get(plugin)) {
        None => return Ok(tool),
        Some(Err(why)) => {
            return Err(Invalid(format!(
                "cannot list the tools of skill `{plugin}`: {why}"
            )));
        }
        Some(Ok(listed)) => listed,
    };
    let names = listed.join(", ");
    match named {
        Some(named) if listed.iter().any(|t| t == named) => Ok(tool),
        Some(named) => Err(Invalid(format!(
            "skill `{plugin}` has no tool `{named}` (its tools: {names})"
        ))),
        None => match listed.as_slice() {
            [only] => Ok(Some(only.clone())),
            [] => Err(Invalid(format!("skill `{plugin}` offers no tools"))),
            _ => Err(Invalid(format!(
                "skill `{plugin}` has several tools ({names}): name one with `tool:` or write `skill: {plugin}__TOOL`"
            ))),
        },
    }
}

/// A cron expression: 5 fields (minute first), 6 (second first), or a
/// nickname (`@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`).
pub fn parse_cron(expr: &str) -> Result<Cron, Invalid> {
    let trimmed = expr.trim();
    let fields = trimmed.split_whitespace().count();
    if !trimmed.starts_with('@') && !(5..=6).contains(&fields) {
        return Err(Invalid(format!(
            "invalid cron expression `{expr}`: expected 5 fields (minute hour day month weekday) \
             or 6 (with seconds first), found {fields}"
        )));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(trimmed)
        .map_err(|err| {
            let why = err.to_string();
            let why = why
                .strip_prefix("Component error: ")
                .unwrap_or(&why)
                .trim_end_matches('.');
            let mut chars = why.chars();
            let why = chars
                .next()
                .map(|first| first.to_lowercase().chain(chars).collect::<String>())
                .unwrap_or_default();
            Invalid(format!(
                "invalid cron expression `{expr}`: {why} (the fields: [second 0-59] minute 0-59, \
                 hour 0-23, day 1-31, month 1-12 or JAN-DEC, weekday 0-7 or SUN-SAT)"
            ))
        })
}

/// A positive duration such as `30s`, `10m`, `2h`, `1d` or `1h 30m`.
pub fn parse_duration(text: &str) -> Result<Duration, Invalid> {
    let duration = humantime::parse_duration(text.trim()).map_err(|_| {
        Invalid(format!(
            "invalid duration `{text}`: write a number and a unit, e.g. 30s, 10m, 2h, 1d or 1h 30m"
        ))
    })?;
    if duration.is_zero() {
        return Err(Invalid(format!(
            "invalid duration `{text}`: must be more than zero"
        )));
    }
    Ok(duration)
}

fn parse_every(text: &str) -> Result<Duration, Invalid> {
    let every = parse_duration(text)?;
    if every < Duration::from_secs(1) || every.subsec_nanos() != 0 {
        return Err(Invalid(format!(
            "invalid interval `{text}`: use whole seconds, at least 1s"
        )));
    }
    Ok(every)
}

/// An RFC 3339 instant with an offset, or a local date-time in `zone`
/// (`2026-12-24T09:00`, seconds optional, `T` or a space). A local time that
/// the zone repeats (fall back) is its first instant; one it skips (spring
/// forward) is an error.
pub fn parse_at(text: &str, zone: Tz) -> Result<DateTime<Utc>, Invalid> {
    let text = text.trim();
    if let Ok(instant) = DateTime::parse_from_rfc3339(text) {
        return Ok(instant.with_timezone(&Utc));
    }
    let local = [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
    .ok_or_else(|| {
        Invalid(format!(
            "invalid date-time `{text}`: expected e.g. 2026-12-24T09:00 (in the task's zone) \
                 or 2026-12-24T09:00:00+08:00"
        ))
    })?;
    match zone.from_local_datetime(&local) {
        chrono::LocalResult::Single(t) => Ok(t.with_timezone(&Utc)),
        chrono::LocalResult::Ambiguous(first, _) => Ok(first.with_timezone(&Utc)),
        chrono::LocalResult::None => Err(Invalid(format!(
            "`{text}` does not exist in {zone} (the clocks skip it)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"tasks:
  - id: morning_briefing
    description: 每天早上9点生成简报
    schedule: "0 9 * * *"
    timezone: Asia/Shanghai
    skill: generate_daily_report
    skill_input: {template: executive_summary}
    deliver_to: ["channel:team-chat"]
    catch_up: once
    overlap: skip
    timeout: 10m
"#;

    fn offline(text: &str) -> Result<Vec<Task>, ConfigError> {
        parse(text, Path::new("schedules.yaml"), &Checks::offline(Tz::UTC))
    }

    #[test]
    fn parses_the_issue_example() {
        let tasks = offline(EXAMPLE).expect("example parses");
        assert_eq!(tasks.len(), 1);
        let task = &tasks[0];
        assert_eq!(task.id, "morning_briefing");
        assert_eq!(task.zone, chrono_tz::Asia::Shanghai);
        assert_eq!(task.catch_up, CatchUp::Once);
        assert_eq!(task.timeout, Duration::from_secs(600));
        assert_eq!(
            task.action,
            Action::Skill {
                skill: "generate_daily_report".into(),
                tool: None,
                input: serde_json::json!({"template": "executive_summary"}),
            }
        );
        assert_eq!(task.deliver_to[0].channel, "team-chat");
    }

    #[test]
    fn defaults_and_other_triggers() {
        let tasks = offline(
            "tasks:\n  - id: a\n    every: 2h\n    prompt: hi\n  - id: b\n    at: 2026-12-24T09:00\n    \
             timezone: Europe/Berlin\n    skill: skill-calc\n    tool: evaluate\n    \
             deliver_to: [{channel: slack, conversation: C1}]\n  - id: c\n    schedule: '@daily'\n    \
             prompt: x\n  - id: d\n    schedule: '*/2 * * * * *'\n    prompt: x\n",
        )
        .expect("parses");
        assert_eq!(tasks[0].catch_up, CatchUp::Once);
        assert_eq!(tasks[0].overlap, Overlap::Skip);
        assert!(matches!(tasks[0].trigger, Trigger::Every(d) if d == Duration::from_secs(7200)));
        let Trigger::At(at) = tasks[1].trigger else {
            panic!("at")
        };
        assert_eq!(at.to_rfc3339(), "2026-12-24T08:00:00+00:00");
        assert_eq!(tasks[1].deliver_to[0].conversation.as_deref(), Some("C1"));
    }

    #[test]
    fn a_prompt_task_names_who_decides_and_where() {
        let tasks = offline(
            "tasks:\n  - id: a\n    every: 2h\n    prompt: hi\n    approvals:\n      \
             ask_in: {channel: slack, conversation: C1, thread: '1.2'}\n      approvers: [U1, U2]\n  \
             - id: b\n    every: 2h\n    prompt: hi\n",
        )
        .expect("parses");
        assert_eq!(
            tasks[0].approvals,
            Some(Asking {
                ask_in: Delivery {
                    channel: "slack".into(),
                    conversation: Some("C1".into()),
                    thread: Some("1.2".into()),
                },
                approvers: vec!["U1".into(), "U2".into()],
            })
        );
        assert_eq!(tasks[1].approvals, None);
    }

    /// The checks a daemon makes, with made-up channels, skills and tools.
    fn online(text: &str) -> String {
        let channels: BTreeSet<String> = ["ops".to_owned(), "chat".to_owned()].into();
        let without_default: BTreeSet<String> = ["chat".to_owned()].into();
        let skill = |name: &str| {
            let plugin = SkillReference::plugin_of(name);
            if ["skill-calc", "skill-notes", "skill-broken"].contains(&plugin) {
                Ok(())
            } else {
                Err(format!(
                    "workspace `team` may not use skill `{plugin}` (add it to workspaces.team.skills)"
                ))
            }
        };
        let tools: BTreeMap<String, Result<Vec<String>, String>> = [
            ("skill-calc".to_owned(), Ok(vec!["evaluate".to_owned()])),
            (
                "skill-notes".to_owned(),
                Ok(vec!["add".to_owned(), "search".to_owned()]),
            ),
            (
                "skill-broken".to_owned(),
                Err("plugin not found".to_owned()),
            ),
        ]
        .into();
        let checks = Checks {
            default_zone: Tz::UTC,
            channels: Some(&channels),
            without_default: Some(&without_default),
            skill: Some(&skill),
            tools: Some(&tools),
        };
        match parse(text, Path::new("schedules.yaml"), &checks) {
            Ok(tasks) => panic!("expected an error, got {tasks:?}"),
            Err(err) => err.to_string(),
        }
    }

    /// Each bad file and its whole message, `FILE:LINE:COLUMN: text`.
    #[test]
    fn bad_files_and_their_exact_messages() {
        const T: &str = "tasks:\n  - id: a\n";
        let cases: &[(&str, String, &str)] = &[
            (
                "unknown key",
                format!("{T}    every: 2h\n    prompt: x\n    colour: red\n"),
                "schedules.yaml:5:5: unknown key `colour` (expected one of `id`, `description`, `schedule`, `every`, `at`, `timezone`, `skill`, `tool`, `skill_input`, `prompt`, `deliver_to`, `catch_up`, `overlap`, `timeout`, `rerun_interrupted`, `approvals`)",
            ),
            (
                "bad cron value",
                format!("{T}    schedule: '61 * * * *'\n    prompt: x\n"),
                "schedules.yaml:3:15: invalid cron expression `61 * * * *`: number out of bounds (the fields: [second 0-59] minute 0-59, hour 0-23, day 1-31, month 1-12 or JAN-DEC, weekday 0-7 or SUN-SAT)",
            ),
            (
                "cron with 3 fields",
                format!("{T}    schedule: '* * *'\n    prompt: x\n"),
                "schedules.yaml:3:15: invalid cron expression `* * *`: expected 5 fields (minute hour day month weekday) or 6 (with seconds first), found 3",
            ),
            (
                "unknown zone",
                format!("{T}    every: 2h\n    timezone: Mars/Olympus\n    prompt: x\n"),
                "schedules.yaml:4:15: unknown time zone `Mars/Olympus` (use an IANA name such as Europe/Berlin)",
            ),
            (
                "missing id",
                "tasks:\n  - every: 1h\n    prompt: x\n".to_owned(),
                "schedules.yaml:2:5: missing required key `id`",
            ),
            (
                "duplicate id",
                format!(
                    "{T}    every: 1h\n    prompt: x\n  - id: a\n    every: 1h\n    prompt: y\n"
                ),
                "schedules.yaml:5:9: duplicate task id `a`",
            ),
            (
                "invalid id",
                "tasks:\n  - id: Bad!\n    every: 1h\n    prompt: x\n".to_owned(),
                "schedules.yaml:2:9: invalid task id `Bad!`: use 1-63 characters from a-z, 0-9, `_` and `-`, starting with a letter or digit",
            ),
            (
                "no trigger",
                format!("{T}    prompt: x\n"),
                "schedules.yaml:2:5: a task needs one of `schedule`, `every` or `at`",
            ),
            (
                "schedule and every",
                format!("{T}    schedule: '* * * * *'\n    every: 1h\n    prompt: x\n"),
                "schedules.yaml:4:5: give only one of `schedule`, `every` and `at`",
            ),
            (
                "every and at",
                format!("{T}    every: 1h\n    at: 2026-01-01T00:00\n    prompt: x\n"),
                "schedules.yaml:4:5: give only one of `schedule`, `every` and `at`",
            ),
            (
                "skill and prompt",
                format!("{T}    every: 1h\n    skill: skill-calc\n    prompt: x\n"),
                "schedules.yaml:5:5: give only one of `skill` and `prompt`",
            ),
            (
                "neither skill nor prompt",
                format!("{T}    every: 1h\n"),
                "schedules.yaml:2:5: a task needs one of `skill` or `prompt`",
            ),
            (
                "tool with a plugin__tool skill",
                format!("{T}    every: 1h\n    skill: skill-calc__evaluate\n    tool: evaluate\n"),
                "schedules.yaml:5:11: `skill: skill-calc__evaluate` already names tool `evaluate` of `skill-calc`: drop `tool:`, or write `skill: skill-calc` and `tool: evaluate`",
            ),
            (
                "tool with a prompt",
                format!("{T}    every: 1h\n    prompt: x\n    tool: evaluate\n"),
                "schedules.yaml:5:5: `tool` belongs to a `skill` task; a `prompt` task takes none",
            ),
            (
                "empty prompt",
                format!("{T}    every: 1h\n    prompt: '  '\n"),
                "schedules.yaml:4:13: `prompt` is empty",
            ),
            (
                "malformed at",
                format!("{T}    at: tomorrow\n    prompt: x\n"),
                "schedules.yaml:3:9: invalid date-time `tomorrow`: expected e.g. 2026-12-24T09:00 (in the task's zone) or 2026-12-24T09:00:00+08:00",
            ),
            (
                "at in the spring-forward gap",
                format!(
                    "{T}    at: 2026-03-08T02:30\n    timezone: America/New_York\n    prompt: x\n"
                ),
                "schedules.yaml:3:9: `2026-03-08T02:30` does not exist in America/New_York (the clocks skip it)",
            ),
            (
                "malformed every",
                format!("{T}    every: soon\n    prompt: x\n"),
                "schedules.yaml:3:12: invalid duration `soon`: write a number and a unit, e.g. 30s, 10m, 2h, 1d or 1h 30m",
            ),
            (
                "every below a second",
                format!("{T}    every: 1500ms\n    prompt: x\n"),
                "schedules.yaml:3:12: invalid interval `1500ms`: use whole seconds, at least 1s",
            ),
            (
                "bad timeout",
                format!("{T}    every: 1h\n    prompt: x\n    timeout: ten minutes\n"),
                "schedules.yaml:5:14: invalid duration `ten minutes`: write a number and a unit, e.g. 30s, 10m, 2h, 1d or 1h 30m",
            ),
            (
                "zero timeout",
                format!("{T}    every: 1h\n    prompt: x\n    timeout: 0s\n"),
                "schedules.yaml:5:14: invalid duration `0s`: must be more than zero",
            ),
            (
                "bad catch_up",
                format!("{T}    every: 1h\n    prompt: x\n    catch_up: sometimes\n"),
                "schedules.yaml:5:15: unknown value `sometimes`, expected one of `skip`, `once`, `all`",
            ),
            (
                "bad overlap",
                format!("{T}    every: 1h\n    prompt: x\n    overlap: wait\n"),
                "schedules.yaml:5:14: unknown value `wait`, expected one of `skip`, `queue`",
            ),
            (
                "YAML syntax error",
                format!("{T}    every: [1h\n    prompt: x\n"),
                "schedules.yaml:4:11: illegal placement of ':' indicator",
            ),
            (
                "wrong type",
                format!("{T}    every: 1h\n    prompt: x\n    rerun_interrupted: maybe\n"),
                "schedules.yaml:5:24: wrong type: expected a boolean, found string \"maybe\"",
            ),
            (
                "tasks not a list",
                "tasks: {a: 1}\n".to_owned(),
                "schedules.yaml:1:8: wrong type: expected a sequence, found map",
            ),
            (
                "invalid delivery",
                format!("{T}    every: 1h\n    prompt: x\n    deliver_to: [slack]\n"),
                "schedules.yaml:5:18: invalid delivery `slack`: expected `channel:NAME` or {channel, conversation, thread}",
            ),
            (
                "unknown key in a delivery",
                format!(
                    "{T}    every: 1h\n    prompt: x\n    deliver_to: [{{channel: ops, room: x}}]\n"
                ),
                "schedules.yaml:5:33: unknown key `room` (expected one of `channel`, `conversation`, `thread`)",
            ),
            (
                "unknown channel",
                format!("{T}    every: 1h\n    prompt: x\n    deliver_to: [\"channel:nope\"]\n"),
                "schedules.yaml:5:18: unknown channel `nope`",
            ),
            (
                "channel without a default conversation",
                format!(
                    "{T}    every: 1h\n    prompt: x\n    deliver_to: [\"channel:ops\", \"channel:chat\"]\n"
                ),
                "schedules.yaml:5:33: channel `chat` has no default conversation: set channels.chat.default_conversation or write {channel: chat, conversation: ID}",
            ),
            (
                "approvals on a skill task",
                format!(
                    "{T}    every: 1h\n    skill: skill-calc\n    approvals: {{ask_in: \"channel:ops\", approvers: [U1]}}\n"
                ),
                "schedules.yaml:5:5: `approvals` belongs to a `prompt` task: a skill call asks nobody",
            ),
            (
                "approvals without approvers",
                format!(
                    "{T}    every: 1h\n    prompt: x\n    approvals: {{ask_in: \"channel:ops\", approvers: []}}\n"
                ),
                "schedules.yaml:5:51: `approvers` lists the sender ids (of the `ask_in` channel) who may decide: give at least one, none empty",
            ),
            (
                "approvals asked in an unknown channel",
                format!(
                    "{T}    every: 1h\n    prompt: x\n    approvals: {{ask_in: \"channel:nope\", approvers: [U1]}}\n"
                ),
                "schedules.yaml:5:25: unknown channel `nope`",
            ),
            (
                "approvals asked in a channel without a default conversation",
                format!(
                    "{T}    every: 1h\n    prompt: x\n    approvals: {{ask_in: \"channel:chat\", approvers: [U1]}}\n"
                ),
                "schedules.yaml:5:25: channel `chat` has no default conversation: set channels.chat.default_conversation or write {channel: chat, conversation: ID}",
            ),
            (
                "skill the workspace may not use",
                format!("{T}    every: 1h\n    skill: skill-weather\n"),
                "schedules.yaml:4:12: workspace `team` may not use skill `skill-weather` (add it to workspaces.team.skills)",
            ),
            (
                "tool the skill does not have",
                format!("{T}    every: 1h\n    skill: skill-calc\n    tool: solve\n"),
                "schedules.yaml:5:11: skill `skill-calc` has no tool `solve` (its tools: evaluate)",
            ),
            (
                "plugin__tool the skill does not have",
                format!("{T}    every: 1h\n    skill: skill-notes__delete\n"),
                "schedules.yaml:4:12: skill `skill-notes` has no tool `delete` (its tools: add, search)",
            ),
            (
                "plugin with several tools and no tool named",
                format!("{T}    every: 1h\n    skill: skill-notes\n"),
                "schedules.yaml:4:12: skill `skill-notes` has several tools (add, search): name one with `tool:` or write `skill: skill-notes__TOOL`",
            ),
            (
                "plugin whose tools cannot be listed",
                format!("{T}    every: 1h\n    skill: skill-broken\n"),
                "schedules.yaml:4:12: cannot list the tools of skill `skill-broken`: plugin not found",
            ),
        ];
        let mut wrong = Vec::new();
        for (what, text, want) in cases {
            let got = online(text);
            if got != *want {
                wrong.push(format!("{what}:\n  got: {got}\n want: {want}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn a_plugin_with_one_tool_gets_it_when_tools_are_listed() {
        let tools: BTreeMap<String, Result<Vec<String>, String>> =
            [("skill-calc".to_owned(), Ok(vec!["evaluate".to_owned()]))].into();
        let checks = Checks {
            tools: Some(&tools),
            ..Checks::offline(Tz::UTC)
        };
        let text = "tasks:\n  - id: a\n    every: 1h\n    skill: skill-calc\n  - id: b\n    every: 1h\n    skill: skill-calc__evaluate\n";
        let tasks = parse(text, Path::new("s.yaml"), &checks).expect("parses");
        let tool_of = |task: &Task| match &task.action {
            Action::Skill { tool, .. } => tool.clone(),
            Action::Prompt(_) => panic!("a skill task"),
        };
        assert_eq!(tool_of(&tasks[0]).as_deref(), Some("evaluate"));
        assert_eq!(tool_of(&tasks[1]), None, "the name already says the tool");
        let offline = offline(text).expect("parses");
        assert_eq!(tool_of(&offline[0]), None, "resolved at run time");
    }

    #[test]
    fn empty_file_has_no_tasks() {
        assert!(offline("").expect("empty").is_empty());
        assert!(offline("tasks: []\n").expect("empty").is_empty());
    }
}
