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
    /// `127.0.0.1:PORT`, once started (the console listens on port 0).
    at: String,
}

/// Waits for the daemon's console line and returns the address the console
/// was given (`web.listen` on port 0: no port is guessed, so parallel tests
/// never race for one).
fn console_at(daemon: &mut Daemon) -> String {
    let line = daemon.wait_for_line("web console on");
    line.split("web console on http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("the banner names the console's address")
        .to_owned()
}

impl Console {
    fn new() -> Self {
        let sandbox = Sandbox::new();
        let config = sandbox.write(
            "pincer.yaml",
            "workspaces:\n  default: {}\nweb:\n  listen: \"127.0.0.1:0\"\n",
        );
        Self {
            sandbox,
            config,
            at: String::new(),
        }
    }

    fn command(&self) -> Command {
        let mut command = self.sandbox.command();
        command.args(["--config", self.config.to_str().unwrap()]);
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

    /// Starts the daemon and learns where its console listens.
    fn start(&mut self) -> Daemon {
        let mut command = self.command();
        command.args(["start", "--listen", "127.0.0.1:0"]);
        let log = self
            .sandbox
            .dir
            .path()
            .join(format!("daemon-{}.log", unique()));
        let mut daemon = Daemon::spawn(command, log);
        self.at = console_at(&mut daemon);
        daemon
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
    let mut console = Console::new();
    let hostile = "<img src=x onerror=alert(1)></script><script>alert(2)</script>";
    let id = console.cli(&["memory", "add", hostile]).trim().to_owned();
    let mut daemon = console.start();
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

    // The audit log's live tail: open before the change, it gets the event.
    let mut tail = http
        .get(console.url("/audit/stream"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(tail.status(), 200);
    assert_eq!(tail.headers()["content-type"], "text/event-stream");

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
        // What a sandboxed frame or a privacy tool sends: without the
        // browser's `Sec-Fetch-Site: same-origin` nothing vouches for it.
        (
            post(vec![("csrf", csrf.clone())], Some("null"))
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
    let mut streamed = String::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while !streamed.contains("memory.forgotten") {
            let chunk = tail.chunk().await.unwrap().expect("the tail stays open");
            streamed.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the forget never reached the tail: {streamed}"));
    assert!(streamed.contains("event: audit"), "{streamed}");
    // Only what happened after it opened.
    assert!(!streamed.contains("web.signed_in"), "{streamed}");
    drop(tail);
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
        assert!(
            body.contains("<h1>") || path.ends_with(".js"),
            "{path}: {body}"
        );
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

/// Reads an open event stream into `read` until it holds `wanted` `times`
/// times (or panics after 60 s).
async fn read_until(stream: &mut reqwest::Response, read: &mut String, wanted: &str, times: usize) {
    let enough = |read: &String| read.matches(wanted).count() >= times;
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while !enough(read) {
            match stream.chunk().await.unwrap() {
                Some(chunk) => read.push_str(&String::from_utf8_lossy(&chunk)),
                None => break,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{wanted:?} ×{times} never came: {read}"));
    assert!(enough(read), "the stream ended first: {read}");
}

/// The chat: a message posted from the console runs a turn in the daemon
/// (real container, scripted model); the page's feed streams it over SSE;
/// each call that needs a person shows inline and is decided from there as
/// `operator:web`; a decision's way back goes only to the chat page; a
/// second message while the turn runs is refused; the model's text arrives
/// escaped; the finished turn stays in the conversation's history.
#[tokio::test(flavor = "multi_thread")]
async fn the_chat_streams_a_turn_and_its_approvals_are_decided_inline() {
    use crate::agent::Env;
    use crate::support::fake_llm::Behaviour;
    let bash = |command: &str| {
        Behaviour::tool(
            "bash",
            &serde_json::json!({ "command": command }).to_string(),
        )
    };
    // `web:` follows the workspaces in the generated configuration.
    let env = Env::new(
        vec![
            bash("touch /workspace/first"),
            bash("touch /workspace/second"),
            Behaviour::answer("<script>alert(1)</script> both written"),
        ],
        "  asked: {approvals: {tier: approval}}\nweb:\n  listen: \"127.0.0.1:0\"\n",
    )
    .await;
    let mut daemon = env.start();
    let at = console_at(&mut daemon);
    let link = crate::support::ok(env.pincer(&["web", "login"]));
    let browser = SignedIn::new(&at, link.trim()).await;
    let send =
        |text: &'static str| browser.post("/chat", &[("workspace", "asked"), ("text", text)]);

    let page = browser.get("/chat?workspace=asked").await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(page.contains("No messages yet"), "{page}");

    // What cannot be sent gets a clear error, and starts nothing.
    let nowhere = browser
        .post("/chat", &[("workspace", "nowhere"), ("text", "hi")])
        .await;
    assert_eq!(nowhere.status(), 404);
    assert!(
        nowhere
            .text()
            .await
            .unwrap()
            .contains("no workspace named `nowhere`")
    );
    let empty = send("   ").await;
    assert_eq!(empty.status(), 400);
    assert!(empty.text().await.unwrap().contains("the message is empty"));

    let sent = send("write two files").await;
    assert_eq!(sent.status(), 303);
    let back = sent.headers()["location"].to_str().unwrap().to_owned();
    assert!(back.starts_with("/chat?workspace=asked&feed="), "{back}");
    let page = browser.get(&back).await.text().await.unwrap();
    let stream = page
        .split("data-chat-feed=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page follows the running turn")
        .replace("&#x2f;", "/")
        .replace("&amp;", "&");
    assert!(page.contains("write two files"), "{page}");
    let mut feed = browser.get(&stream).await;
    assert_eq!(feed.status(), 200);
    assert_eq!(feed.headers()["content-type"], "text/event-stream");

    // One turn at a time in a conversation.
    let busy = send("and another").await;
    assert_eq!(busy.status(), 409);
    assert!(busy.text().await.unwrap().contains("still running"));

    let request_of = |read: &str, nth: usize| -> String {
        read.split("action=\\\"/approvals/")
            .nth(nth)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("approval #{nth} in the feed: {read}"))
            .to_owned()
    };
    let mut read = String::new();
    read_until(&mut feed, &mut read, "Approve once", 1).await;
    let first = request_of(&read, 1);
    assert!(read.contains("touch &#x2f;workspace&#x2f;first"), "{read}");
    // A way back to another site is not followed: the plain result page.
    let decided = browser
        .post(
            &format!("/approvals/{first}/decide"),
            &[("decision", "once"), ("back", "//attacker.example/")],
        )
        .await;
    assert_eq!(decided.status(), 200);
    read_until(&mut feed, &mut read, "Approve once", 2).await;
    let second = request_of(&read, 2);
    assert_ne!(first, second);
    let decided = browser
        .post(
            &format!("/approvals/{second}/decide"),
            &[("decision", "once"), ("back", &back)],
        )
        .await;
    assert_eq!(decided.status(), 303);
    assert_eq!(decided.headers()["location"], back.as_str());
    read_until(&mut feed, &mut read, "event: end", 1).await;
    assert!(read.contains("Turn done."), "{read}");
    assert!(
        read.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt; both written"),
        "{read}"
    );
    assert!(!read.contains("<script>alert"), "{read}");
    let dir = env.workspace_dir("asked");
    assert!(dir.join("first").exists() && dir.join("second").exists());
    assert_eq!(
        env.sandbox
            .audited("approval.granted")
            .iter()
            .filter(|d| d.contains("by operator:web"))
            .count(),
        2
    );

    // Finished, the turn is the conversation's history; the page no
    // longer follows a feed and the form is open again.
    let page = browser
        .get("/chat?workspace=asked")
        .await
        .text()
        .await
        .unwrap();
    assert!(!page.contains("data-chat-feed"), "{page}");
    assert!(page.contains("both written") && page.contains("write two files"));
    assert!(!page.contains("<script>alert"), "{page}");
    daemon.stop();
}

/// The console in a real headless Chromium (Debian's chromium and
/// chromium-driver, driven by the official selenium client from
/// `tests/python/console_browser.py`): every page has one heading, labelled
/// controls and no console error or CSP violation; stored and model text
/// with markup shows as text and runs nothing; a chat turn streams and its
/// call is allowed "always" from the chat; that rule is revoked on
/// /approvals; a task runs now from /schedules while the audit page's live
/// tail shows the request. Then the host's side of each: the file written,
/// no rule left, the decisions audited as the console's.
#[tokio::test(flavor = "multi_thread")]
async fn a_real_browser_reads_every_page_chats_decides_and_revokes() {
    use crate::agent::Env;
    use crate::support::fake_llm::Behaviour;
    use crate::support::gateway::{python, python_script};
    use crate::support::ok;
    let hostile = "<img src=x onerror=alert(1)>";
    let env = Env::new(
        vec![
            Behaviour::tool("bash", r#"{"command":"touch /workspace/browser"}"#),
            // Late enough that the page the decision returns to is loaded
            // before the reply streams in.
            Behaviour::slow_answer(2000, &format!("{hostile} written")),
            Behaviour::answer("Q4 numbers are in"),
        ],
        "  asked: {approvals: {tier: approval}}\nweb:\n  listen: \"127.0.0.1:0\"\n",
    )
    .await;
    env.sandbox.write(
        "workspaces/asked/schedules.yaml",
        "tasks:\n  - id: yearly\n    schedule: \"0 0 1 1 *\"\n    prompt: write the yearly report\n",
    );
    ok(env.pincer(&["memory", "add", "--workspace", "asked", hostile]));
    let mut daemon = env.start();
    console_at(&mut daemon);
    let link = ok(env.pincer(&["web", "login"]));
    let out = Command::new(python())
        .arg(python_script("console_browser.py"))
        .args([link.trim(), "asked", "yearly", hostile])
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    assert!(out.status.success(), "{said}");
    assert!(env.workspace_dir("asked").join("browser").exists());
    let rules = ok(env.pincer(&["approvals", "rules", "-w", "asked"]));
    assert!(rules.contains("has no \"always\" rules"), "{rules}");
    let granted = env.sandbox.audited("approval.granted");
    assert!(
        granted.len() == 1
            && granted[0].contains("approved always")
            && granted[0].contains("operator:web"),
        "{granted:?}"
    );
    let revoked = env.sandbox.audited("approval.rule_revoked");
    assert!(
        revoked.len() == 1 && revoked[0].contains("operator:web"),
        "{revoked:?}"
    );
    assert_eq!(env.sandbox.audited("schedule.run_requested").len(), 1);
    daemon.stop();
}

/// A container never reaches the console, even when its workspace grants
/// it every port of the host's loopback (`127.0.0.1:*`): the proxy refuses pincer's
/// own listeners (the console, the gateway's TCP port) whatever a
/// workspace lists, says why, and audits it. (Containers have no route of
/// their own: `egress.rs` shows that.)
#[tokio::test(flavor = "multi_thread")]
async fn no_egress_grant_reaches_the_console_or_the_gateway_from_a_container() {
    use crate::agent::Env;
    let env = Env::new(
        Vec::new(),
        "  open: {egress: [\"127.0.0.1:*\"]}\nweb:\n  listen: \"127.0.0.1:0\"\n",
    )
    .await;
    let mut daemon = env.start();
    let at = console_at(&mut daemon);
    let gateway = daemon.gateway.trim_start_matches("http://").to_owned();
    for (target, whose) in [
        (at.as_str(), "web.listen"),
        (gateway.as_str(), "gateway.listen"),
    ] {
        let fetched = env.pincer(&[
            "workspace",
            "exec",
            "open",
            "--",
            "sh",
            "-c",
            &format!("wget -S -O- http://{target}/signin 2>&1; true"),
        ]);
        let said = String::from_utf8_lossy(&fetched.stdout).to_string();
        assert!(said.contains("403"), "{target}: {said}");
        assert!(!said.contains("Sign in"), "{target}: {said}");
        let refused = env.sandbox.audited("egress.refused");
        assert!(
            refused
                .iter()
                .any(|r| r.contains(target)
                    && r.contains(&format!("pincer's own listener ({whose})"))),
            "{refused:?}"
        );
    }
    daemon.stop();
}

/// A browser signed in to a console on `at`: its cookie and CSRF token.
struct SignedIn {
    http: reqwest::Client,
    at: String,
    cookie: String,
    csrf: String,
}

impl SignedIn {
    async fn new(at: &str, link: &str) -> Self {
        let http = client();
        let (cookie, _) = sign_in(&http, link).await;
        let mut signed = SignedIn {
            http,
            at: at.to_owned(),
            cookie,
            csrf: String::new(),
        };
        signed.csrf = csrf_of(&signed.get("/").await.text().await.unwrap());
        signed
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("http://{}{path}", self.at))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap()
    }

    /// A same-origin form post carrying the CSRF token.
    fn post(
        &self,
        path: &str,
        fields: &[(&str, &str)],
    ) -> impl Future<Output = reqwest::Response> + use<> {
        let mut form = vec![("csrf", self.csrf.clone())];
        form.extend(fields.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let request = self
            .http
            .post(format!("http://{}{path}", self.at))
            .header("cookie", &self.cookie)
            .header("origin", format!("http://{}", self.at))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(&form));
        async move { request.send().await.unwrap() }
    }
}

/// A task the agent proposes (from a chat turn, through its
/// `schedule__create` tool) waits on /schedules with *Approve* and
/// *Cancel*; approving it there enables it (audited as the console's),
/// cancelling removes it; a task from `schedules.yaml` cannot be
/// "approved" and says what to do instead.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_the_agent_proposes_is_approved_and_cancelled_from_the_console() {
    use crate::agent::Env;
    use crate::support::fake_llm::Behaviour;
    let create = r#"{"id":"standup","schedule":"0 9 * * 1-5","timezone":"Asia/Shanghai","prompt":"write the standup notes"}"#;
    let env = Env::new(
        vec![
            Behaviour::tool("schedule__create", create),
            Behaviour::answer("I proposed a standup task"),
        ],
        "  team: {agent_schedules: propose}\nweb:\n  listen: \"127.0.0.1:0\"\n",
    )
    .await;
    env.sandbox.write(
        "workspaces/team/schedules.yaml",
        "tasks:\n  - id: yearly\n    schedule: \"0 0 1 1 *\"\n    prompt: write the yearly report\n",
    );
    let mut daemon = env.start();
    let at = console_at(&mut daemon);
    let link = crate::support::ok(env.pincer(&["web", "login"]));
    let browser = SignedIn::new(&at, link.trim()).await;

    let sent = browser
        .post(
            "/chat",
            &[("workspace", "team"), ("text", "remind us every weekday")],
        )
        .await;
    assert_eq!(sent.status(), 303);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let listed = loop {
        let page = browser.get("/schedules").await.text().await.unwrap();
        if page.contains("Approve agent-standup") {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never proposed: {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(listed.contains("pending approval"), "{listed}");
    assert!(!listed.contains("Approve yearly"), "{listed}");

    let refused = browser.post("/schedules/team/yearly/approve", &[]).await;
    assert_eq!(refused.status(), 400);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("approve and cancel are for tasks the agent proposed")
    );
    let approved = browser
        .post("/schedules/team/agent-standup/approve", &[])
        .await;
    assert_eq!(approved.status(), 200);
    let said = approved.text().await.unwrap();
    assert!(
        said.contains("approved task `agent-standup` of workspace `team`"),
        "{said}"
    );
    let again = browser
        .post("/schedules/team/agent-standup/approve", &[])
        .await;
    assert_eq!(again.status(), 400);
    assert!(again.text().await.unwrap().contains("is active already"));
    let listed = browser.get("/schedules").await.text().await.unwrap();
    assert!(listed.contains("Run agent-standup now"), "{listed}");

    let cancelled = browser
        .post("/schedules/team/agent-standup/cancel", &[])
        .await;
    assert_eq!(cancelled.status(), 200);
    let listed = browser.get("/schedules").await.text().await.unwrap();
    assert!(!listed.contains("agent-standup"), "{listed}");
    let approvals = env.sandbox.audited("schedule.approved");
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(env.sandbox.audited("schedule.cancelled").len(), 1);
    let actors: Vec<String> = env
        .sandbox
        .rows("SELECT actor FROM audit_events WHERE kind IN ('schedule.approved', 'schedule.cancelled') ORDER BY id")
        .iter()
        .map(|r| r.get(0).unwrap())
        .collect();
    assert_eq!(actors, ["web", "web"]);
    daemon.stop();
}

/// Two daemons on one machine, every TCP listener on port 0: each gets a
/// free port of its own, shown in the banner and in `pincer status`, and
/// `pincer web login` links to the port the console was given.
#[tokio::test(flavor = "multi_thread")]
async fn listeners_on_port_0_get_free_ports_shown_in_status_and_the_login_link() {
    let mut consoles = [Console::new(), Console::new()];
    // Before a daemon picked the port there is no link to give.
    let early = consoles[0]
        .command()
        .args(["web", "login"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&early.stderr);
    assert!(
        !early.status.success() && said.contains("no daemon is running: start it, then sign in"),
        "{said}"
    );
    let mut daemons: Vec<Daemon> = consoles.iter_mut().map(Console::start).collect();
    let http = client();
    let mut ports = Vec::new();
    for (console, daemon) in consoles.iter().zip(daemons.iter_mut()) {
        let gateway = daemon.gateway.trim_start_matches("http://").to_owned();
        let banner_console = console.at.clone();
        let port = |at: &str| {
            at.rsplit(':')
                .next()
                .and_then(|p| p.parse::<u16>().ok())
                .expect("an address with a port")
        };
        assert_ne!(port(&gateway), 0, "{}", daemon.banner);
        assert_ne!(port(&banner_console), 0, "{}", daemon.banner);

        // The snapshot is written before the banner: `pincer status` shows
        // the bound addresses at once.
        let status: serde_json::Value =
            serde_json::from_str(&console.cli(&["status", "--json"])).unwrap();
        assert_eq!(status["daemon"]["gateway"], gateway.as_str());
        assert_eq!(status["daemon"]["console"], banner_console.as_str());
        let text = console.cli(&["status"]);
        assert!(
            text.contains(&format!("gateway http://{gateway}/v1"))
                && text.contains(&format!("web console http://{banner_console}/")),
            "{text}"
        );

        // The sign-in link points at the console's real port, and works.
        let link = console.cli(&["web", "login"]);
        let link = link.trim();
        assert!(
            link.starts_with(&format!("http://{banner_console}/login?token=")),
            "{link}"
        );
        let (cookie, _) = sign_in(&http, link).await;
        let home = http
            .get(format!("http://{banner_console}/"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(home.status(), 200);
        ports.push((port(&gateway), port(&banner_console)));
    }
    assert!(
        ports[0].0 != ports[1].0 && ports[0].1 != ports[1].1,
        "{ports:?}"
    );
    for daemon in &mut daemons {
        assert!(daemon.stop().success(), "{}", daemon.log());
    }
}

/// Signing in writes the database, so a sign-in link tried while another
/// process holds the database's lock waits for it (5 s) and is refused.
/// Anyone who reaches the console can send such links, no session needed:
/// with more of them waiting than the daemon's runtime has threads, the
/// console and the gateway must still answer at once, and a real link
/// still signs in once the lock is gone.
#[tokio::test(flavor = "multi_thread")]
async fn sign_ins_waiting_on_a_locked_store_do_not_stall_the_daemon() {
    let mut console = Console::new();
    let mut daemon = console.start();
    let http = client();
    let lock = console.sandbox.lock_db();
    let in_flight = 2 * std::thread::available_parallelism().map_or(2, usize::from);
    let waiting: Vec<_> = (0..in_flight)
        .map(|i| {
            http.get(console.url(&format!("/login?token={i:064x}")))
                .timeout(std::time::Duration::from_secs(30))
                .send()
        })
        .collect();
    let checks = async {
        // The sign-ins are waiting on the lock by now.
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        crate::support::not_answered_at_once(&[
            (console.url("/signin"), 200),
            (format!("{}/health", daemon.gateway), 200),
        ])
        .await
    };
    let (waited, slow) = tokio::join!(futures_util::future::join_all(waiting), checks);
    assert!(
        slow.is_empty(),
        "{slow:?} while {in_flight} sign-ins waited on the lock\n{}",
        daemon.log()
    );
    // Nothing to send: the outbox never tried to claim (a write) meanwhile.
    assert!(
        !daemon.log().contains("outbox: cannot claim rows"),
        "{}",
        daemon.log()
    );
    for answer in waited {
        let status = answer.expect("the console answers").status().as_u16();
        assert!(
            status == 403 || (500..600).contains(&status),
            "a made-up link signed in: {status}"
        );
    }
    lock.release();
    let link = console.cli(&["web", "login"]);
    let (cookie, _) = sign_in(&http, link.trim()).await;
    let home = http
        .get(console.url("/"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(home.status(), 200);
    assert!(daemon.stop().success(), "{}", daemon.log());
}
