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
//! ```

use std::collections::{BTreeSet, HashSet};
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

use crate::config::{ConfigError, Document, Seg, is_valid_name, parse_located};

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
    /// Checks a skill name (`plugin`, or `plugin__tool` when `tool:` is
    /// given); `None` skips the check. The error text is shown as is.
    pub skill: Option<SkillCheck<'a>>,
}

impl Checks<'_> {
    /// No channel or skill checks; tasks without `timezone:` use `zone`.
    pub fn offline(zone: Tz) -> Checks<'static> {
        Checks {
            default_zone: zone,
            channels: None,
            skill: None,
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
            cron: Box::new(parse_cron(expr).map_err(|m| at.invalid("schedule", &m))?),
            expr: expr.clone(),
        },
        (None, Some(every), None) => {
            Trigger::Every(parse_every(every).map_err(|m| at.invalid("every", &m))?)
        }
        (None, None, Some(when)) => {
            Trigger::At(parse_at(when, zone).map_err(|m| at.invalid("at", &m))?)
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
                if skill.contains("__") {
                    return Err(
                        at.invalid("tool", "`tool` needs `skill` to name a plugin, not a tool")
                    );
                }
                if tool.is_empty() {
                    return Err(at.invalid("tool", "`tool` is empty"));
                }
            }
            if let Some(check) = checks.skill {
                let name = match &raw.tool {
                    Some(tool) => format!("{skill}__{tool}"),
                    None => skill.clone(),
                };
                check(&name).map_err(|m| {
                    at.invalid(if raw.tool.is_some() { "tool" } else { "skill" }, &m)
                })?;
            }
            Action::Skill {
                skill,
                tool: raw.tool,
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
                    "only a `skill` task takes this",
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
        if let Some(channels) = checks.channels
            && !channels.contains(&delivery.channel)
        {
            return Err(at.invalid_at(
                &[Seg::Key("deliver_to"), Seg::Index(i)],
                false,
                &format!("unknown channel `{}`", delivery.channel),
            ));
        }
        deliver_to.push(delivery);
    }

    let timeout = match &raw.timeout {
        Some(text) => parse_duration(text).map_err(|m| at.invalid("timeout", &m))?,
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
    })
}

/// A cron expression: 5 fields (minute first), 6 (second first), or a
/// nickname (`@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`).
pub fn parse_cron(expr: &str) -> Result<Cron, String> {
    let trimmed = expr.trim();
    let fields = trimmed.split_whitespace().count();
    if !trimmed.starts_with('@') && !(5..=6).contains(&fields) {
        return Err(format!(
            "invalid cron expression `{expr}`: expected 5 fields (minute hour day month weekday) \
             or 6 (with seconds first), found {fields}"
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(trimmed)
        .map_err(|err| format!("invalid cron expression `{expr}`: {err}"))
}

/// A positive duration such as `30s`, `10m`, `2h`, `1d` or `1h 30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim())
        .map_err(|err| format!("invalid duration `{text}`: {err} (e.g. 30s, 10m, 2h, 1d)"))?;
    if duration.is_zero() {
        return Err(format!("invalid duration `{text}`: must be more than zero"));
    }
    Ok(duration)
}

fn parse_every(text: &str) -> Result<Duration, String> {
    let every = parse_duration(text)?;
    if every < Duration::from_secs(1) || every.subsec_nanos() != 0 {
        return Err(format!(
            "invalid interval `{text}`: use whole seconds, at least 1s"
        ));
    }
    Ok(every)
}

/// An RFC 3339 instant with an offset, or a local date-time in `zone`
/// (`2026-12-24T09:00`, seconds optional, `T` or a space). A local time that
/// the zone repeats (fall back) is its first instant; one it skips (spring
/// forward) is an error.
pub fn parse_at(text: &str, zone: Tz) -> Result<DateTime<Utc>, String> {
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
        format!(
            "invalid date-time `{text}`: expected e.g. 2026-12-24T09:00 (in the task's zone) \
                 or 2026-12-24T09:00:00+08:00"
        )
    })?;
    match zone.from_local_datetime(&local) {
        chrono::LocalResult::Single(t) => Ok(t.with_timezone(&Utc)),
        chrono::LocalResult::Ambiguous(first, _) => Ok(first.with_timezone(&Utc)),
        chrono::LocalResult::None => Err(format!(
            "`{text}` does not exist in {zone} (the clocks skip it)"
        )),
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

    fn error(text: &str) -> String {
        match offline(text) {
            Ok(tasks) => panic!("expected an error, got {tasks:?}"),
            Err(err) => err.to_string(),
        }
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
    fn errors_are_located() {
        let cases: &[(&str, &str)] = &[
            (
                "tasks:\n  - id: a\n    schedule: '61 * * * *'\n    prompt: x\n",
                "schedules.yaml:3:15: invalid cron expression",
            ),
            (
                "tasks:\n  - id: a\n    schedule: '* * *'\n    prompt: x\n",
                "schedules.yaml:3:15: invalid cron expression `* * *`: expected 5 fields",
            ),
            (
                "tasks:\n  - id: a\n    every: 2h\n    timezone: Mars/Olympus\n    prompt: x\n",
                "schedules.yaml:4:15: unknown time zone `Mars/Olympus`",
            ),
            (
                "tasks:\n  - id: a\n    every: 2h\n    prompt: x\n    colour: red\n",
                "schedules.yaml:5:5: unknown key `colour`",
            ),
            (
                "tasks:\n  - id: a\n    prompt: x\n",
                "schedules.yaml:2:5: a task needs one of `schedule`, `every` or `at`",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n    at: 2026-01-01T00:00\n    prompt: x\n",
                "schedules.yaml:4:5: give only one",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n",
                "schedules.yaml:2:5: a task needs one of `skill` or `prompt`",
            ),
            (
                "tasks:\n  - id: a\n    every: soon\n    prompt: x\n",
                "schedules.yaml:3:12: invalid duration `soon`",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n  - id: a\n    every: 1h\n    prompt: y\n",
                "schedules.yaml:5:9: duplicate task id `a`",
            ),
            (
                "tasks:\n  - id: Bad!\n    every: 1h\n    prompt: x\n",
                "schedules.yaml:2:9: invalid task id `Bad!`",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n    deliver_to: [slack]\n",
                "schedules.yaml:5:18: invalid delivery `slack`",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n    deliver_to: [{channel: s, room: x}]\n",
                "schedules.yaml:5:31: unknown key `room`",
            ),
            (
                "tasks:\n  - id: a\n    at: 2026-03-08T02:30\n    timezone: America/New_York\n    prompt: x\n",
                "schedules.yaml:3:9: `2026-03-08T02:30` does not exist",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n    catch_up: sometimes\n",
                "schedules.yaml:5:15: unknown value `sometimes`",
            ),
        ];
        for (text, want) in cases {
            let got = error(text);
            assert!(got.starts_with(want), "{text}\n got: {got}\nwant: {want}");
        }
    }

    #[test]
    fn channels_and_skills_are_checked_when_given() {
        let channels: BTreeSet<String> = ["ops".to_owned()].into();
        let skill = |name: &str| {
            if name == "generate_daily_report" {
                Ok(())
            } else {
                Err(format!("unknown skill `{name}`"))
            }
        };
        let checks = Checks {
            default_zone: Tz::UTC,
            channels: Some(&channels),
            skill: Some(&skill),
        };
        let err = parse(EXAMPLE, Path::new("s.yaml"), &checks)
            .expect_err("team-chat is unknown")
            .to_string();
        assert!(
            err.starts_with("s.yaml:8:18: unknown channel `team-chat`"),
            "{err}"
        );
        let text = EXAMPLE.replace("team-chat", "ops");
        parse(&text, Path::new("s.yaml"), &checks).expect("known channel and skill");
        let text = text.replace("skill: generate_daily_report", "skill: nope");
        let err = parse(&text, Path::new("s.yaml"), &checks)
            .expect_err("unknown skill")
            .to_string();
        assert!(
            err.starts_with("s.yaml:6:12: unknown skill `nope`"),
            "{err}"
        );
    }

    #[test]
    fn empty_file_has_no_tasks() {
        assert!(offline("").expect("empty").is_empty());
        assert!(offline("tasks: []\n").expect("empty").is_empty());
    }
}
