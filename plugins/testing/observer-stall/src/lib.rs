//! Test fixture: an observer whose `on-event` loops forever, so tests can
//! show a stuck observer neither slows nor breaks the turn it observes.

wit_bindgen::generate!({
    path: "../../../wit/v0.1.0",
    world: "observer-plugin",
});

use exports::pincer::plugin::observer::Guest;
use pincer::plugin::types::Event;
use std::hint::black_box;

struct ObserverStall;

impl Guest for ObserverStall {
    fn on_event(_event: Event) {
        // black_box keeps the optimiser from proving the loop has no effect.
        let mut counter = 0u64;
        loop {
            counter = black_box(counter.wrapping_add(1));
        }
    }
}

export!(ObserverStall);
