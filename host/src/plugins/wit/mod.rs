//! The WIT releases this host serves, side by side. A released version is
//! frozen (its own folder under `wit/` and its own module here), so plugins
//! built against it keep loading after newer releases appear.

use semver::Version;
use wasmtime::component::Linker;

use super::state::PluginState;

mod convert;
pub mod worlds;

pub mod v0_1_0;
pub mod v0_2_0;
pub mod v0_3_0;
pub mod v0_4_0;
pub mod v0_5_0;

/// The newest release; its types are the host's API types.
pub use v0_5_0 as latest;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WitRelease {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_4_0,
    V0_5_0,
}

impl WitRelease {
    pub const ALL: [WitRelease; 5] = [
        WitRelease::V0_1_0,
        WitRelease::V0_2_0,
        WitRelease::V0_3_0,
        WitRelease::V0_4_0,
        WitRelease::V0_5_0,
    ];

    pub fn version(self) -> Version {
        match self {
            Self::V0_1_0 => Version::new(0, 1, 0),
            Self::V0_2_0 => Version::new(0, 2, 0),
            Self::V0_3_0 => Version::new(0, 3, 0),
            Self::V0_4_0 => Version::new(0, 4, 0),
            Self::V0_5_0 => Version::new(0, 5, 0),
        }
    }

    /// The served release a plugin built against `wanted` can use: same
    /// major (for 0.x, same minor), and not newer than what is served.
    pub fn for_plugin(wanted: &Version) -> Option<Self> {
        Self::ALL.into_iter().find(|r| {
            let served = r.version();
            let same_major = if served.major == 0 {
                wanted.major == 0 && wanted.minor == served.minor
            } else {
                wanted.major == served.major
            };
            same_major && *wanted <= served && wanted.pre.is_empty()
        })
    }

    /// Links `pre` against this release's world of `kind`.
    pub fn prepare(
        self,
        kind: crate::plugins::manifest::PluginKind,
        pre: wasmtime::component::InstancePre<PluginState>,
    ) -> wasmtime::Result<Box<dyn worlds::Prepared>> {
        match self {
            Self::V0_1_0 => v0_1_0::prepare(kind, pre),
            Self::V0_2_0 => v0_2_0::prepare(kind, pre),
            Self::V0_3_0 => v0_3_0::prepare(kind, pre),
            Self::V0_4_0 => v0_4_0::prepare(kind, pre),
            Self::V0_5_0 => v0_5_0::prepare(kind, pre),
        }
    }

    /// Whether a channel of this release exports `describe`, `status` and
    /// `check` (0.2.0 and later); the host answers for older ones.
    pub fn channel_can_describe(self) -> bool {
        self >= Self::V0_2_0
    }

    pub fn served_list() -> String {
        Self::ALL
            .iter()
            .map(|r| r.version().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Adds the host imports of every served release to one linker.
pub fn add_to_linker(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    // Quota-checked writes under /data, in place of wasmtime-wasi's own.
    super::capabilities::data::add_to_linker(linker)?;
    v0_1_0::add_to_linker(linker)?;
    v0_2_0::add_to_linker(linker)?;
    v0_3_0::add_to_linker(linker)?;
    v0_4_0::add_to_linker(linker)?;
    v0_5_0::add_to_linker(linker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_match_by_major() {
        let v = |s: &str| Version::parse(s).unwrap();
        assert_eq!(
            WitRelease::for_plugin(&v("0.1.0")),
            Some(WitRelease::V0_1_0)
        );
        assert_eq!(
            WitRelease::for_plugin(&v("0.2.0")),
            Some(WitRelease::V0_2_0)
        );
        assert_eq!(
            WitRelease::for_plugin(&v("0.3.0")),
            Some(WitRelease::V0_3_0)
        );
        assert_eq!(
            WitRelease::for_plugin(&v("0.4.0")),
            Some(WitRelease::V0_4_0)
        );
        assert_eq!(
            WitRelease::for_plugin(&v("0.5.0")),
            Some(WitRelease::V0_5_0)
        );
        assert_eq!(WitRelease::for_plugin(&v("0.6.0")), None);
        assert_eq!(WitRelease::for_plugin(&v("1.0.0")), None);
        assert_eq!(
            WitRelease::for_plugin(&v("0.1.1")),
            None,
            "newer than served"
        );
    }
}
