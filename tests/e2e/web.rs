//! The web console of the real `pincer start`, over its real socket: the
//! one-time sign-in link, the cookie, the refusals (foreign Host, foreign
//! origin, missing CSRF token, no session), the security headers, text
//! shown escaped, and a form that changes state through the same function
//! as the CLI (forgetting a memory).

use std::process::Command;

use crate::support::{Sandbox, daemon::Daemon, unique};

struct Console {
    sandbox: Sandbox,
    config: std::path::PathBuf,
    /// `127.0.0.1:PORT`
    at: String,
}

impl Console {
    fn new() -> Self {
        let sandbox = Sandbox::new();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let at = format!("127.0.0.1:{port}");
        let config = sandbox.write(
            "pincer.yaml",
            &format!("workspaces:\n  default: {{}}\nweb:\n  listen: \"{at}\"\n"),
        );
        Self {
            sandbox,
            config,
            at,
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pincer"));
        command
            .args(["--config", self.config.to_str().unwrap()])
            .current_dir(self.sandbox.work())
            .env("PINCER_HOME", self.sandbox.home())
            .env_remove("PINCER_LOG");
        command
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "pincer {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn start(&self) -> Daemon {
        let mut command = self.command();
        command.args(["start", "--listen", "127.0.0.1:0"]);
        let log = self
            .sandbox
            .dir
            .path()
            .join(format!("daemon-{}.log", unique()));
        Daemon::spawn(command, log)
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.at)
    }
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The session cookie a sign-in link sets (`name=value`), and the whole
/// `Set-Cookie` header.
async fn sign_in(http: &reqwest::Client, link: &str) -> (String, String) {
    let response = http.get(link).send().await.unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/");
    let set = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    let pair = set.split(';').next().unwrap().to_owned();
    (pair, set)
}

/// An `application/x-www-form-urlencoded` body.
fn form_body(pairs: &[(&str, String)]) -> String {
    let mut body = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        body.append_pair(key, value);
    }
    body.finish()
}

fn csrf_of(page: &str) -> String {
    page.split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF field in the page")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_signs_in_once_refuses_foreign_requests_and_escapes_text() {
    let console = Console::new();
    let hostile = "<img src=x onerror=alert(1)></script><script>alert(2)</script>";
    let id = console.cli(&["memory", "add", hostile]).trim().to_owned();
    let mut daemon = console.start();
    daemon.wait_for_line("web console on");
    let http = client();

    // No session: pages send to the sign-in page, forms are refused.
    let page = http.get(console.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 303);
    assert_eq!(page.headers()["location"], "/signin");

    // The link works once.
    let link = console.cli(&["web", "login"]);
    let link = link.trim();
    assert!(link.starts_with(&console.url("/login?token=")), "{link}");
    let (cookie, set) = sign_in(&http, link).await;
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let again = http.get(link).send().await.unwrap();
    assert_eq!(again.status(), 403);
    assert!(again.headers().get("set-cookie").is_none());

    // Another Host (DNS rebinding) is not answered.
    let rebound = http
        .get(console.url("/"))
        .header(
            "host",
            format!("attacker.example:{}", console.at.split(':').nth(1).unwrap()),
        )
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 421);

    // The memory's text is shown as text, under a strict CSP.
    let page = http
        .get(console.url("/workspaces/default"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    assert_eq!(page.headers()["referrer-policy"], "no-referrer");
    let body = page.text().await.unwrap();
    assert!(
        !body.contains("<img src=x") && !body.contains("<script>alert"),
        "{body}"
    );
    assert!(
        body.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{body}"
    );
    let csrf = csrf_of(&body);

    // Forgetting the memory: refused without the token, with a wrong one,
    // from another origin; nothing is lost by a refusal.
    let forget = console.url(&format!("/workspaces/default/memories/{id}/forget"));
    let post = |form: Vec<(&'static str, String)>, origin: Option<&'static str>| {
        let mut request = http
            .post(&forget)
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(&form));
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    let refusals = [
        (
            post(vec![], None).await.unwrap(),
            "missing or wrong CSRF token",
        ),
        (
            post(vec![("csrf", "0".repeat(64))], None).await.unwrap(),
            "missing or wrong CSRF token",
        ),
        (
            post(
                vec![("csrf", csrf.clone())],
                Some("http://attacker.example"),
            )
            .await
            .unwrap(),
            "cross-origin request refused",
        ),
    ];
    for (response, why) in refusals {
        assert_eq!(response.status(), 403);
        assert!(response.text().await.unwrap().contains(why));
    }
    let cross_site = http
        .post(&forget)
        .header("cookie", &cookie)
        .header("sec-fetch-site", "cross-site")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", csrf.clone())]))
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site.status(), 403);
    assert!(console.cli(&["memory", "list"]).contains("onerror"));

    let done = http
        .post(&forget)
        .header("cookie", &cookie)
        .header("origin", format!("http://{}", console.at))
        .header("sec-fetch-site", "same-origin")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", csrf.clone())]))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200);
    assert!(
        done.text()
            .await
            .unwrap()
            .contains(&format!("forgot memory #{id}"))
    );
    assert!(!console.cli(&["memory", "list"]).contains("onerror"));
    assert_eq!(
        console.sandbox.audited("memory.forgotten"),
        vec![format!("memory #{id} forgotten")]
    );
    assert_eq!(console.sandbox.audited("web.signed_in").len(), 1);

    // Every page renders for a signed-in browser.
    for path in [
        "/",
        "/sessions",
        "/approvals",
        "/schedules",
        "/workspaces",
        "/usage",
        "/audit",
        "/channels",
    ] {
        let page = http
            .get(console.url(path))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "{path}");
        let body = page.text().await.unwrap();
        assert!(body.contains("<h1>"), "{path}: {body}");
    }

    // Signing everyone out ends the session.
    assert!(
        console
            .cli(&["web", "logout", "--all"])
            .contains("signed out 1")
    );
    let after = http
        .get(console.url("/"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 303);
    daemon.stop();
}

#[test]
fn a_console_beyond_loopback_needs_allow_remote() {
    let sandbox = Sandbox::new();
    let config = sandbox.write("pincer.yaml", "web:\n  listen: \"0.0.0.0:4299\"\n");
    let out = sandbox.pincer(&["config", "check", "--config", config.to_str().unwrap()]);
    assert!(!out.status.success());
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("web.allow_remote: true"), "{said}");
}
