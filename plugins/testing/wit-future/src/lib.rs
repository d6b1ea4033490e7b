//! Test fixture: a component exporting `pincer:plugin/skill@0.9.0`, a
//! release newer than any host serves.

wit_bindgen::generate!({
    path: "wit",
    world: "skill-plugin",
});

use exports::pincer::plugin::skill::Guest;

struct Future;

impl Guest for Future {
    fn tools() -> Vec<String> {
        vec!["from-the-future".into()]
    }
}

export!(Future);
