//! The console's HTML, from minijinja templates compiled into the binary.
//! Every `.html` template escapes what it prints, so text from a message,
//! a tool, a model or a plugin is shown as text.

use minijinja::Environment;
use serde::Serialize;

const PAGES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("signin.html", include_str!("templates/signin.html")),
    ("overview.html", include_str!("templates/overview.html")),
    ("sessions.html", include_str!("templates/sessions.html")),
    ("session.html", include_str!("templates/session.html")),
    ("approvals.html", include_str!("templates/approvals.html")),
    ("schedules.html", include_str!("templates/schedules.html")),
    ("task.html", include_str!("templates/task.html")),
    ("workspaces.html", include_str!("templates/workspaces.html")),
    ("workspace.html", include_str!("templates/workspace.html")),
    ("usage.html", include_str!("templates/usage.html")),
    ("audit.html", include_str!("templates/audit.html")),
    ("channels.html", include_str!("templates/channels.html")),
    ("message.html", include_str!("templates/message.html")),
    ("chat.html", include_str!("templates/chat.html")),
    ("chat_item.html", include_str!("templates/chat_item.html")),
];

pub struct Templates {
    env: Environment<'static>,
}

impl Templates {
    pub fn new() -> Result<Self, minijinja::Error> {
        let mut env = Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        for (name, source) in PAGES {
            env.add_template(name, source)?;
        }
        env.add_filter("when", |ms: Option<i64>| {
            ms.map_or_else(|| "—".to_owned(), crate::db::utc_text)
        });
        Ok(Self { env })
    }

    pub fn render(&self, name: &str, context: impl Serialize) -> Result<String, minijinja::Error> {
        self.env
            .get_template(name)?
            .render(minijinja::value::Serde(context))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        let t = Templates::new().unwrap();
        let html = t
            .render(
                "message.html",
                minijinja::context! {
                    title => "x", csrf => "c", heading => "<img src=x onerror=alert(1)>",
                    message => "</script><script>alert(1)</script>",
                },
            )
            .unwrap();
        assert!(!html.contains("<img src=x"), "{html}");
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{html}"
        );
    }
}
