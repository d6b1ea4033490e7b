//! Routing strategies across the deployments of one alias.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;

fn two_deployments(fake: &Fake, strategy: RoutingStrategy) -> Gateway {
    let mut cfg = gateway(
        vec![
            openai_dep(fake, "pool", "d0"),
            openai_dep(fake, "pool", "d1"),
        ],
        &[],
        strategy,
        0,
    );
    cfg.timeout = 5.0;
    cfg
}

async fn wait_for_request(fake: &Fake, names: &[&str]) -> String {
    for _ in 0..500 {
        for name in names {
            if fake.count(name) > 0 {
                return (*name).to_owned();
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no request arrived");
}

#[tokio::test]
async fn least_busy_chooses_the_idle_deployment() {
    let fake = Fake::start().await;
    // Requests saying HOLD take 800 ms, others are answered at once.
    let reply = |name: &str| Reply::DelayIf("HOLD", Duration::from_millis(800), Box::new(ok(name)));
    fake.script("d0", vec![reply("d0")]);
    fake.script("d1", vec![reply("d1")]);
    let r = std::sync::Arc::new(router(&two_deployments(&fake, RoutingStrategy::LeastBusy)));
    let busy_router = std::sync::Arc::clone(&r);
    let hold =
        serde_json::json!({"model": "pool", "messages": [{"role": "user", "content": "HOLD"}]});
    let busy = tokio::spawn(async move { busy_router.chat(hold).await });
    let busy_name = wait_for_request(&fake, &["d0", "d1"]).await;
    // One request is in flight on `busy_name`: the next goes to the other.
    for _ in 0..3 {
        let (_, _, deployment) = complete(r.chat(chat_request("pool")).await.unwrap());
        let idle_index = if busy_name == "d0" { 1 } else { 0 };
        assert_eq!(
            deployment,
            format!("pool#{idle_index} (openai/gpt-4o-mini)")
        );
    }
    let (_, _, first) = complete(busy.await.unwrap().unwrap());
    let busy_index = if busy_name == "d0" { 0 } else { 1 };
    assert_eq!(first, format!("pool#{busy_index} (openai/gpt-4o-mini)"));
}

#[tokio::test]
async fn latency_based_tries_each_then_prefers_the_fastest() {
    let fake = Fake::start().await;
    fake.script("d0", vec![ok("fast")]);
    fake.script(
        "d1",
        vec![Reply::Delay(
            Duration::from_millis(200),
            Box::new(ok("slow")),
        )],
    );
    let r = router(&two_deployments(&fake, RoutingStrategy::LatencyBased));
    let mut first_two = BTreeSet::new();
    for _ in 0..2 {
        let (_, _, d) = complete(r.chat(chat_request("pool")).await.unwrap());
        first_two.insert(d);
    }
    assert_eq!(
        first_two.len(),
        2,
        "untried deployments come first: {first_two:?}"
    );
    for _ in 0..5 {
        let (_, _, d) = complete(r.chat(chat_request("pool")).await.unwrap());
        assert_eq!(d, "pool#0 (openai/gpt-4o-mini)");
    }
    assert_eq!(fake.count("d1"), 1);
}

#[tokio::test]
async fn simple_shuffle_spreads_the_load() {
    let fake = Fake::start().await;
    fake.script("d0", vec![ok("d0")]);
    fake.script("d1", vec![ok("d1")]);
    let r = router(&two_deployments(&fake, RoutingStrategy::SimpleShuffle));
    for _ in 0..40 {
        complete(r.chat(chat_request("pool")).await.unwrap());
    }
    // With 40 fair coin flips, one side getting nothing has odds 2^-39.
    assert!(fake.count("d0") > 0 && fake.count("d1") > 0);
    assert_eq!(r.deployments().len(), 2);
}
