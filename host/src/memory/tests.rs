use super::*;
use crate::args;
use crate::db::testing::{database, each_backend};
use crate::db::{Db, Location};

fn open(at: &Location) -> MemoryStore {
    MemoryStore::open_at(at, None).unwrap()
}

fn ids(found: &[Recalled]) -> Vec<i64> {
    found.iter().map(|r| r.memory.id).collect()
}

fn execute(store: &MemoryStore, sql: &str, args: &[crate::db::Value]) -> usize {
    store.db().run(|conn| conn.execute(sql, args)).unwrap()
}

#[test]
fn chinese_query_finds_a_differently_worded_preference() {
    each_backend(|at| {
        let store = open(at);
        let seat = store
            .add("main", MemoryKind::Preference, "用户喜欢靠窗的座位")
            .unwrap();
        store
            .add("main", MemoryKind::Fact, "公司年会定在十二月")
            .unwrap();
        let found = store.search("main", "座位偏好", 5).unwrap();
        assert_eq!(ids(&found), [seat.id]);
        assert_eq!(found[0].matched_by, MatchKind::Index);
        assert_eq!(found[0].memory.kind, MemoryKind::Preference);
    });
}

#[test]
fn english_recall_ignores_case_and_punctuation() {
    each_backend(|at| {
        let store = open(at);
        let m = store
            .add(
                "main",
                MemoryKind::Fact,
                "Deploys go through GitHub Actions.",
            )
            .unwrap();
        store
            .add("main", MemoryKind::Fact, "Lunch is at noon")
            .unwrap();
        for query in ["github", "GITHUB actions?", "how do deploys work"] {
            let found = store.search("main", query, 5).unwrap();
            assert_eq!(ids(&found), [m.id], "{query}");
        }
    });
}

#[test]
fn mixed_chinese_english_text_is_found_by_either_language() {
    each_backend(|at| {
        let store = open(at);
        let m = store
            .add(
                "main",
                MemoryKind::Procedure,
                "部署前先运行 cargo test，然后推送到 main 分支",
            )
            .unwrap();
        store
            .add("main", MemoryKind::Fact, "周五下午团队开会")
            .unwrap();
        for query in ["Cargo", "部署流程", "推送 main"] {
            assert_eq!(
                ids(&store.search("main", query, 5).unwrap()),
                [m.id],
                "{query}"
            );
        }
    });
}

#[test]
fn the_index_ranks_better_matches_first() {
    each_backend(|at| {
        let store = open(at);
        let both = store
            .add("main", MemoryKind::Preference, "喜欢喝咖啡，不加糖")
            .unwrap();
        let one = store
            .add(
                "main",
                MemoryKind::Fact,
                "办公室的咖啡机在三楼，旁边是会议室和打印机",
            )
            .unwrap();
        let found = store.search("main", "咖啡 不加糖", 5).unwrap();
        assert_eq!(ids(&found), [both.id, one.id]);
        assert!(found[0].score > found[1].score);
    });
}

#[test]
fn a_query_the_index_misses_falls_back_to_substring() {
    each_backend(|at| {
        let store = open(at);
        let m = store
            .add("main", MemoryKind::Preference, "用户喜欢靠窗的座位")
            .unwrap();
        let pref = store
            .add(
                "main",
                MemoryKind::Fact,
                "Theme preference: solarized_dark (100%)",
            )
            .unwrap();
        let found = store.search("main", "窗的座", 5).unwrap();
        assert_eq!(ids(&found), [m.id]);
        assert_eq!(found[0].matched_by, MatchKind::Substring);
        // Part of a word, and LIKE wildcards taken literally.
        assert_eq!(ids(&store.search("main", "solariz", 5).unwrap()), [pref.id]);
        // LIKE ignores the case of ASCII letters, on either backend.
        assert_eq!(ids(&store.search("main", "SOLARIZ", 5).unwrap()), [pref.id]);
        assert_eq!(ids(&store.search("main", "d_dark", 5).unwrap()), [pref.id]);
        assert_eq!(ids(&store.search("main", "(100%)", 5).unwrap()), [pref.id]);
        assert!(store.search("main", "d%k", 5).unwrap().is_empty());
        assert!(
            store
                .search("main", "nothing like it", 5)
                .unwrap()
                .is_empty()
        );
    });
}

#[test]
fn fts5_syntax_in_queries_is_just_text() {
    each_backend(|at| {
        let store = open(at);
        let m = store
            .add(
                "main",
                MemoryKind::Fact,
                "Use NEAR-line storage for backups: s3",
            )
            .unwrap();
        for query in [
            "\"",
            "\"backups",
            "backups AND",
            "AND OR NOT",
            "* backups*",
            "NEAR(backups storage, 2)",
            "-backups",
            "terms: backups",
            "space : x",
            "backups ^ {terms}",
            "(((",
            "')--",
            "\\",
            "。，！",
        ] {
            let result = store.search("main", query, 5);
            assert!(result.is_ok(), "{query}: {result:?}");
        }
        assert_eq!(
            ids(&store.search("main", "NEAR(backups", 5).unwrap()),
            [m.id]
        );
        assert_eq!(ids(&store.search("main", "terms: s3", 5).unwrap()), [m.id]);
    });
}

#[test]
fn workspaces_never_see_each_others_memories() {
    each_backend(|at| {
        let store = open(at);
        let a = store
            .add("alpha", MemoryKind::Fact, "The wifi password is hunter2")
            .unwrap();
        store
            .add("beta", MemoryKind::Fact, "beta likes tea")
            .unwrap();
        // Index, substring and listing paths.
        assert!(
            store
                .search("beta", "wifi password", 10)
                .unwrap()
                .is_empty()
        );
        assert!(store.search("beta", "unter", 10).unwrap().is_empty());
        assert!(store.recall("beta", "hunter2", 10).unwrap().is_empty());
        assert!(
            store
                .list("beta", 10)
                .unwrap()
                .iter()
                .all(|m| m.workspace == "beta")
        );
        assert!(!store.forget("beta", a.id).unwrap());
        assert_eq!(ids(&store.search("alpha", "wifi", 10).unwrap()), [a.id]);
        // A workspace whose name is a prefix of another's.
        store
            .add("alp", MemoryKind::Fact, "alp has wifi too")
            .unwrap();
        assert_eq!(store.search("alpha", "wifi", 10).unwrap().len(), 1);
        assert_eq!(store.search("alp", "wifi", 10).unwrap().len(), 1);
    });
}

#[test]
fn the_same_text_again_returns_the_existing_memory() {
    each_backend(|at| {
        let store = open(at);
        let first = store
            .add("main", MemoryKind::Fact, "Office is in Hangzhou")
            .unwrap();
        let again = store
            .add("main", MemoryKind::Preference, "  Office is in Hangzhou \n")
            .unwrap();
        assert_eq!(again, first);
        assert_eq!(store.count("main").unwrap(), 1);
        // Another workspace gets its own copy.
        let other = store
            .add("other", MemoryKind::Fact, "Office is in Hangzhou")
            .unwrap();
        assert_ne!(other.id, first.id);
        assert_eq!(store.search("main", "hangzhou", 5).unwrap().len(), 1);
    });
}

#[test]
fn empty_and_oversized_text_is_refused_with_a_clear_error() {
    each_backend(|at| {
        let store = open(at);
        for text in ["", "   \n\t "] {
            let err = store.add("main", MemoryKind::Fact, text).unwrap_err();
            assert!(matches!(err, MemoryError::EmptyText), "{err}");
        }
        let long = "长".repeat(MAX_TEXT_BYTES / 3 + 1);
        let err = store.add("main", MemoryKind::Fact, &long).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "a memory can hold at most 8192 bytes of text; this one has {}",
                long.len()
            )
        );
        let exactly = "a".repeat(MAX_TEXT_BYTES);
        assert!(store.add("main", MemoryKind::Fact, &exactly).is_ok());
        assert!(matches!(
            store.search("main", "  ", 5).unwrap_err(),
            MemoryError::EmptyQuery
        ));
        assert_eq!(store.count("main").unwrap(), 1);
    });
}

#[test]
fn recall_counts_a_use_and_search_does_not() {
    each_backend(|at| {
        let store = open(at);
        let m = store.add("main", MemoryKind::Fact, "coffee at 9").unwrap();
        store.search("main", "coffee", 5).unwrap();
        assert_eq!(store.list("main", 1).unwrap()[0].use_count, 0);
        let found = store.recall("main", "coffee", 5).unwrap();
        assert_eq!(found[0].memory.use_count, 1);
        assert!(found[0].memory.last_used_ms.is_some());
        let stored = &store.list("main", 1).unwrap()[0];
        assert_eq!((stored.id, stored.use_count), (m.id, 1));
        assert_eq!(stored.last_used_ms, found[0].memory.last_used_ms);
    });
}

#[test]
fn use_and_recency_order_equally_relevant_memories() {
    each_backend(|at| {
        let store = open(at);
        let latte = store
            .add("main", MemoryKind::Preference, "coffee order: macchiato")
            .unwrap();
        let mocha = store
            .add("main", MemoryKind::Preference, "coffee order: americano")
            .unwrap();
        // Equal BM25 (both kinds of coffee have a stem and a truncated form);
        // the newer (higher id) wins the tie-break only.
        let found = store.search("main", "coffee", 5).unwrap();
        assert_eq!(ids(&found), [mocha.id, latte.id]);
        assert!((found[0].score - found[1].score).abs() < 1e-9);

        for _ in 0..3 {
            store.recall("main", "macchiato", 1).unwrap();
        }
        assert_eq!(
            ids(&store.search("main", "coffee", 5).unwrap()),
            [latte.id, mocha.id]
        );

        // Age both into the past, then make mocha recent again: recency wins.
        let old = crate::db::now_ms() - 90 * 86_400_000;
        execute(
            &store,
            "UPDATE memories SET created_ms = ?1, last_used_ms = ?1, use_count = 0",
            args![old],
        );
        store.recall("main", "americano", 1).unwrap();
        execute(&store, "UPDATE memories SET use_count = 0", args![]);
        assert_eq!(
            ids(&store.search("main", "coffee", 5).unwrap()),
            [mocha.id, latte.id]
        );
    });
}

#[test]
fn forget_removes_a_memory_from_recall_and_list() {
    each_backend(|at| {
        let store = open(at);
        let m = store
            .add("main", MemoryKind::Fact, "车牌号是浙A12345")
            .unwrap();
        assert_eq!(ids(&store.search("main", "车牌号", 5).unwrap()), [m.id]);
        assert!(store.forget("main", m.id).unwrap());
        assert!(!store.forget("main", m.id).unwrap());
        assert!(store.search("main", "车牌号", 5).unwrap().is_empty());
        assert!(store.search("main", "A12345", 5).unwrap().is_empty());
        assert!(store.list("main", 10).unwrap().is_empty());
        // The same text can be memorized again afterwards.
        let again = store
            .add("main", MemoryKind::Fact, "车牌号是浙A12345")
            .unwrap();
        assert_ne!(again.id, m.id);
        assert_eq!(ids(&store.search("main", "车牌号", 5).unwrap()), [again.id]);
    });
}

#[test]
fn list_is_newest_first_and_limited() {
    each_backend(|at| {
        let store = open(at);
        let made: Vec<i64> = (0..5)
            .map(|i| {
                store
                    .add("main", MemoryKind::Fact, &format!("note {i}"))
                    .unwrap()
                    .id
            })
            .collect();
        let listed: Vec<i64> = store
            .list("main", 3)
            .unwrap()
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(listed, [made[4], made[3], made[2]]);
        assert!(store.list("main", 0).unwrap().is_empty());
    });
}

#[test]
fn memories_survive_reopening_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = MemoryStore::open(dir.path()).unwrap();
        store
            .add("main", MemoryKind::Procedure, "发布流程：先打标签再构建")
            .unwrap()
            .id
    };
    let store = MemoryStore::open(dir.path()).unwrap();
    let found = store.recall("main", "发布", 5).unwrap();
    assert_eq!(ids(&found), [id]);
    assert_eq!(found[0].memory.kind, MemoryKind::Procedure);
    assert!(dir.path().join(crate::db::FILE_NAME).exists());

    let at = database();
    let id = open(&at)
        .add("main", MemoryKind::Procedure, "发布流程：先打标签再构建")
        .unwrap()
        .id;
    let found = open(&at).recall("main", "发布", 5).unwrap();
    assert_eq!(ids(&found), [id]);
    assert_eq!(found[0].memory.kind, MemoryKind::Procedure);
}

#[test]
fn limits_cap_results() {
    each_backend(|at| {
        let store = open(at);
        for i in 0..20 {
            store
                .add(
                    "main",
                    MemoryKind::Fact,
                    &format!("server {i} runs postgres"),
                )
                .unwrap();
        }
        assert_eq!(store.search("main", "postgres", 7).unwrap().len(), 7);
        assert!(store.search("main", "postgres", 0).unwrap().is_empty());
    });
}

#[test]
fn kinds_parse_and_print_in_lowercase() {
    for kind in MemoryKind::ALL {
        assert_eq!(kind.to_string().parse::<MemoryKind>().unwrap(), kind);
    }
    assert_eq!(
        "Preference".parse::<MemoryKind>().unwrap(),
        MemoryKind::Preference
    );
    let err = "opinion".parse::<MemoryKind>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown memory kind `opinion`: use fact, preference or procedure"
    );
    assert_eq!(
        serde_json::to_string(&MemoryKind::Procedure).unwrap(),
        "\"procedure\""
    );
}

#[test]
fn the_store_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<MemoryStore>();
}

#[test]
fn common_terms_give_way_to_rarer_ones_and_alone_still_find_the_newest() {
    each_backend(|at| {
        let store = open(at);
        let texts: Vec<String> = (0..4_100).map(|i| format!("tea note {i}")).collect();
        let made = store.add_many("main", MemoryKind::Fact, &texts).unwrap();
        let jasmine = store
            .add("main", MemoryKind::Preference, "green tea with jasmine")
            .unwrap();
        store
            .add("other", MemoryKind::Fact, "tea in another workspace")
            .unwrap();

        let found = store.search("main", "jasmine tea", 3).unwrap();
        assert_eq!(found[0].memory.id, jasmine.id);
        assert_eq!(found[0].matched_by, MatchKind::Index);

        // Only a common term: the newest matches of this workspace.
        let found = store.search("main", "tea", 3).unwrap();
        assert_eq!(ids(&found), [jasmine.id, made[4_099].id, made[4_098].id]);
    });
}

#[test]
fn a_term_is_common_or_rare_by_its_own_workspaces_count() {
    each_backend(|at| {
        let store = open(at);
        let elsewhere: Vec<String> = (0..600).map(|i| format!("tea elsewhere {i}")).collect();
        store
            .add_many("other", MemoryKind::Fact, &elsewhere)
            .unwrap();
        let best = store.add("main", MemoryKind::Fact, "tea").unwrap();
        // Newer, longer, weaker matches: more than the candidates taken when a
        // term is common, so only ranking by relevance finds `best` first.
        let noise: Vec<String> = (0..80)
            .map(|i| {
                format!("tea came up once in a long note about deploys, budgets and trains {i}")
            })
            .collect();
        store.add_many("main", MemoryKind::Fact, &noise).unwrap();
        let found = store.search("main", "tea", 1).unwrap();
        assert_eq!(ids(&found), [best.id]);
    });
}

#[test]
fn the_substring_fallback_reads_only_the_newest_memories() {
    each_backend(|at| {
        let store = open(at);
        let old = store
            .add("main", MemoryKind::Fact, "locker code qx-old-7731")
            .unwrap();
        let filler: Vec<String> = (0..20_000).map(|i| format!("filler {i}")).collect();
        store.add_many("main", MemoryKind::Fact, &filler).unwrap();
        // "x" and "ol" are no index terms: only a substring search could find it,
        // and the old memory is beyond the newest 20,000.
        assert!(store.search("main", "x-ol", 5).unwrap().is_empty());
        let new = store
            .add("main", MemoryKind::Fact, "locker code qx-old-7732")
            .unwrap();
        let found = store.search("main", "x-ol", 5).unwrap();
        assert_eq!(ids(&found), [new.id]);
        assert_eq!(found[0].matched_by, MatchKind::Substring);
        assert_ne!(new.id, old.id);
    });
}

#[test]
fn a_database_with_the_old_index_is_reindexed_without_losing_a_memory() {
    let dir = tempfile::tempdir().unwrap();
    {
        let conn = crate::db::open(&dir.path().join(crate::db::FILE_NAME)).unwrap();
        conn.execute_batch(
            "CREATE TABLE memories (
                 id INTEGER PRIMARY KEY AUTOINCREMENT, workspace TEXT NOT NULL,
                 kind TEXT NOT NULL, text TEXT NOT NULL, created_ms INTEGER NOT NULL,
                 last_used_ms INTEGER, use_count INTEGER NOT NULL DEFAULT 0,
                 UNIQUE (workspace, text));
             CREATE VIRTUAL TABLE memory_fts USING fts5 (
                 space, terms, content = '', contentless_delete = 1, tokenize = 'ascii');
             INSERT INTO memories (workspace, kind, text, created_ms)
                 VALUES ('main', 'preference', '用户喜欢靠窗的座位', 1);
             INSERT INTO memory_fts (rowid, space, terms)
                 VALUES (1, 'w6d61696e', '用户 喜欢 靠窗 座位');",
        )
        .unwrap();
    }
    let store = MemoryStore::open(dir.path()).unwrap();
    let found = store.search("main", "座位偏好", 5).unwrap();
    assert_eq!(ids(&found), [1]);
    assert_eq!(found[0].matched_by, MatchKind::Index);
    let old: i64 = store
        .db()
        .run(|conn| {
            conn.query_one(
                "SELECT count(*) FROM sqlite_master WHERE name = 'memory_fts'",
                args![],
            )?
            .get(0)
        })
        .unwrap();
    assert_eq!(old, 0);
    drop(store);
    // Reopening again changes nothing.
    let store = MemoryStore::open(dir.path()).unwrap();
    assert_eq!(ids(&store.search("main", "座位", 5).unwrap()), [1]);
}

#[test]
fn a_database_of_the_previous_index_version_is_reindexed_without_losing_a_memory() {
    let dir = tempfile::tempdir().unwrap();
    {
        // The layout before the second list: word terms only, no memory_meta.
        let conn = crate::db::open(&dir.path().join(crate::db::FILE_NAME)).unwrap();
        conn.execute_batch(
            "CREATE TABLE memories (
                 id INTEGER PRIMARY KEY AUTOINCREMENT, workspace TEXT NOT NULL,
                 kind TEXT NOT NULL, text TEXT NOT NULL, created_ms INTEGER NOT NULL,
                 last_used_ms INTEGER, use_count INTEGER NOT NULL DEFAULT 0,
                 UNIQUE (workspace, text));
             CREATE VIRTUAL TABLE memory_index USING fts5 (
                 terms, content = '', contentless_delete = 1, tokenize = 'ascii');
             INSERT INTO memories (workspace, kind, text, created_ms)
                 VALUES ('main', 'fact', 'The team meets on Mondays', 1);
             INSERT INTO memory_index (rowid, terms)
                 VALUES (1, '6d61696exteam 6d61696exmeets 6d61696exmondays');",
        )
        .unwrap();
    }
    let store = MemoryStore::open(dir.path()).unwrap();
    // Only the stems of the new list match another word form.
    let found = store.search("main", "weekly meeting", 5).unwrap();
    assert_eq!(ids(&found), [1]);
    assert_eq!(found[0].matched_by, MatchKind::Index);
    assert_eq!(store.count("main").unwrap(), 1);
    drop(store);
    let store = MemoryStore::open(dir.path()).unwrap();
    assert_eq!(ids(&store.search("main", "team", 5).unwrap()), [1]);
}

/// Another connection writing to the same database (the session store, the
/// audit log, a second pincer process) must never make a memory write fail:
/// a deferred transaction that reads first and writes second would get
/// SQLITE_BUSY (snapshot) at once, without waiting, whenever a write landed
/// in between.
#[test]
fn memory_writes_succeed_while_another_connection_writes() {
    each_backend(|at| {
        let store = open(at);
        let other = Db::open(at).unwrap();
        other
            .run(|c| c.schema("CREATE TABLE IF NOT EXISTS noise (n INTEGER)"))
            .unwrap();
        let stop = &std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let other = &other;
            let writer = s.spawn(move || {
                let mut writes = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    other
                        .run(|c| c.execute("INSERT INTO noise VALUES (1)", args![]))
                        .unwrap();
                    writes += 1;
                }
                writes
            });
            for i in 0..300 {
                let text = format!("memory number {i} about 座位 {i}");
                let outcome = store
                    .add("main", MemoryKind::Fact, &text)
                    .and_then(|_| store.add_many("main", MemoryKind::Fact, &[&text]))
                    .and_then(|_| store.recall("main", "座位", 3));
                if let Err(e) = outcome {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    panic!("write {i} failed beside another writer: {e}");
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(writer.join().unwrap() > 0, "the other writer never wrote");
        });
        assert_eq!(store.count("main").unwrap(), 300);
    });
}

/// The store on SQLite and on PostgreSQL, given the same memories (the
/// labelled set in Chinese, English and mixed text, in two workspaces, some
/// forgotten), ranks every labelled query the same, and FTS5's BM25 and the
/// one computed over PostgreSQL's postings agree on every match.
#[test]
fn both_backends_rank_the_labelled_set_the_same() {
    let data: serde_json::Value =
        serde_json::from_str(include_str!("../../benches/data/memory_labelled.json")).unwrap();
    let strings = |list: &str, field: &str| -> Vec<String> {
        data[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[field].as_str().unwrap().to_owned())
            .collect()
    };
    let (texts, queries) = (strings("memories", "text"), strings("queries", "q"));
    let dir = tempfile::tempdir().unwrap();
    let stores = [
        open(&Location::Sqlite(dir.path().join(crate::db::FILE_NAME))),
        open(&database()),
    ];
    for store in &stores {
        let made = store.add_many("team", MemoryKind::Fact, &texts).unwrap();
        // BM25's row count and average length are the whole index's.
        store
            .add_many("other", MemoryKind::Fact, &texts[..120])
            .unwrap();
        // Forgetting takes a memory's length out of them again.
        for m in made.iter().step_by(9) {
            assert!(store.forget("team", m.id).unwrap());
        }
        store
            .add_many("team", MemoryKind::Preference, &queries[..40])
            .unwrap();
        // Rows with no term still count in the index's row count.
        store
            .add_many("team", MemoryKind::Fact, &["……", "?!"])
            .unwrap();
        // More equal BM25 scores than candidates are taken (64).
        let ties: Vec<String> = (0..100).map(|i| format!("tea note {i:03}")).collect();
        store.add_many("ties", MemoryKind::Fact, &ties).unwrap();
    }
    let [sqlite, postgres] = stores
        .each_ref()
        .map(|s| s.search("ties", "tea", 3).unwrap());
    assert_eq!(ids(&sqlite), ids(&postgres));
    // The lower ids are the candidates; of those the newest ranks first.
    let first = stores[1].list("ties", 100).unwrap()[99].id;
    assert_eq!(ids(&postgres), [first + 63, first + 62, first + 61]);
    let relevance = |r: &Recalled| r.why.as_ref().map_or(1.0, |w| w.relevance);
    let (mut results, mut scores, mut largest) = (0, 0, 0f64);
    for q in &queries {
        let [sqlite, postgres] = stores.each_ref().map(|s| s.search("team", q, 10).unwrap());
        assert_eq!(ids(&sqlite), ids(&postgres), "{q}");
        for (a, b) in sqlite.iter().zip(&postgres) {
            assert_eq!(a.matched_by, b.matched_by, "{q}");
            assert!(
                (relevance(a) - relevance(b)).abs() <= 1e-9,
                "{q}: {a:?} {b:?}"
            );
        }
        results += sqlite.len();
        for (prefix, terms) in [
            (query::term_prefix("team"), segment::query_terms(q, 64)),
            (
                query::variant_prefix("team"),
                segment::query_variants(q, 64),
            ),
        ] {
            let [sqlite, postgres] = stores
                .each_ref()
                .map(|s| s.bm25("team", &prefix, &terms).unwrap());
            let matched = |found: &[(i64, f64)]| found.iter().map(|m| m.0).collect::<Vec<_>>();
            assert_eq!(matched(&sqlite), matched(&postgres), "{q}: {terms:?}");
            for (a, b) in sqlite.iter().zip(&postgres) {
                let difference = (a.1 - b.1).abs();
                assert!(difference <= 1e-9, "{q}: {a:?} {b:?}");
                largest = largest.max(difference);
            }
            scores += sqlite.len();
        }
    }
    eprintln!(
        "{} queries: {results} results the same; {scores} BM25 scores, largest difference {largest:e}",
        queries.len()
    );
    assert!(results > 2_000 && scores > 10_000, "{results} {scores}");
}

/// Two daemons on one PostgreSQL database: what one stores or forgets the
/// other finds or no longer finds, and writing at once (serializable
/// transactions, run again when they lose a conflict) keeps the index's
/// totals exact.
#[test]
fn two_stores_on_one_postgres_database_share_memories() {
    let at = database();
    let (a, b) = (open(&at), open(&at));
    let m = a
        .add(
            "main",
            MemoryKind::Fact,
            "The deploy key rotates every Monday",
        )
        .unwrap();
    assert_eq!(ids(&b.search("main", "deploy key", 5).unwrap()), [m.id]);
    assert_eq!(ids(&b.search("main", "rotat", 5).unwrap()), [m.id]);
    assert!(b.forget("main", m.id).unwrap());
    assert!(a.search("main", "deploy key", 5).unwrap().is_empty());

    std::thread::scope(|s| {
        for (n, store) in [&a, &b].into_iter().enumerate() {
            s.spawn(move || {
                for i in 0..30 {
                    store
                        .add("main", MemoryKind::Fact, &format!("构建 note {n}-{i}"))
                        .unwrap();
                    store
                        .add_many(
                            "main",
                            MemoryKind::Fact,
                            &[format!("pipeline {n}-{i} 构建")],
                        )
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(b.count("main").unwrap(), 120);
    let (rows, tokens, docs, length): (i64, i64, i64, i64) = a
        .db()
        .run(|c| {
            let row = c.query_one(
                "SELECT (SELECT value FROM memory_meta WHERE key = 'index_rows'),
                        (SELECT value FROM memory_meta WHERE key = 'index_tokens'),
                        (SELECT count(*) FROM memory_index_docs),
                        (SELECT CAST(COALESCE(SUM(length), 0) AS BIGINT) FROM memory_index_docs)",
                args![],
            )?;
            Ok::<_, crate::db::DbError>((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .unwrap();
    assert_eq!((rows, tokens), (docs, length));
    assert_eq!(docs, 120);
}

/// The vectors' side of the store without a model: stored as a blob (BYTEA
/// on PostgreSQL), loaded per workspace and reloaded when the generation
/// moves, gone with their memory, dropped when the model changes.
#[test]
fn vectors_are_stored_loaded_and_dropped_on_both_backends() {
    each_backend(|at| {
        let store = open(at);
        let near = store.add("main", MemoryKind::Fact, "near").unwrap();
        let far = store.add("main", MemoryKind::Fact, "far").unwrap();
        let unit = |v: [f32; 3]| embed::Vector::quantize(&v);
        let stored = store
            .db()
            .transaction(|c| {
                let mut stored = vectors::store(c, near.id, "main", &unit([1.0, 0.0, 0.0]))?;
                stored &= vectors::store(c, far.id, "main", &unit([0.0, 1.0, 0.0]))?;
                // A memory that is not there gets no vector.
                stored &= !vectors::store(c, far.id + 100, "main", &unit([1.0, 0.0, 0.0]))?;
                vectors::bump_generation(c)?;
                Ok::<_, crate::db::DbError>(stored)
            })
            .unwrap();
        assert!(stored);
        let cache = vectors::Cache::default();
        let query = unit([0.9, 0.1, 0.0]);
        let nearest = |cache: &vectors::Cache| {
            let loaded = store.db().run(|c| cache.get(c, "main", 3)).unwrap();
            loaded
                .nearest(&query, 5)
                .iter()
                .map(|n| n.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(nearest(&cache), [near.id, far.id]);
        assert_eq!(store.unembedded(Some("main")).unwrap(), 0);

        assert!(store.forget("main", near.id).unwrap());
        assert_eq!(nearest(&cache), [far.id]);

        store
            .db()
            .transaction(|c| vectors::adopt_model(c, "another-model"))
            .unwrap();
        assert!(nearest(&cache).is_empty());
        assert_eq!(store.unembedded(Some("main")).unwrap(), 1);
        assert_eq!(
            store.db().run(vectors::stored_model).unwrap().as_deref(),
            Some("another-model")
        );
    });
}
