//! Writes the `wit_bindgen::generate!` calls for the WIT release in `wit/`.
//!
//! The release is chosen in one place, the folder `wit/` (in pincer's tree a
//! link to `wit/vX.Y.Z`): its package line gives the version that the `with`
//! keys sharing one set of import types across the four worlds must name.

use std::error::Error;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The worlds whose bindings are generated, with the Cargo feature that
/// enables each (`None`: always; its imports are the ones the others share).
const WORLDS: &[(&str, &str, Option<&str>)] = &[
    ("host", "channel-plugin", None),
    ("skill_world", "skill-plugin", Some("skill")),
    ("observer_world", "observer-plugin", Some("observer")),
    ("tunnel_world", "tunnel-plugin", Some("tunnel")),
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=wit");
    let worlds = std::fs::read_to_string("wit/worlds.wit")
        .map_err(|e| format!("reading wit/worlds.wit: {e}"))?;
    let version = package_version(&worlds)
        .ok_or("wit/worlds.wit has no `package pincer:plugin@X.Y.Z;` line")?;
    println!("cargo:rustc-env=PINCER_SDK_WIT_VERSION={version}");

    let mut out = String::new();
    for (module, world, feature) in WORLDS {
        if let Some(feature) = feature {
            writeln!(out, "#[cfg(feature = {feature:?})]")?;
        }
        writeln!(out, "pub mod {module} {{\n    wit_bindgen::generate!({{")?;
        writeln!(out, "        path: \"wit\",\n        world: {world:?},")?;
        writeln!(
            out,
            "        pub_export_macro: true,\n        export_macro_name: \"export\","
        )?;
        writeln!(
            out,
            "        default_bindings_module: \"$crate::wit::{module}\","
        )?;
        if feature.is_some() {
            writeln!(out, "        with: {{")?;
            for interface in world_imports(&worlds, world)? {
                writeln!(
                    out,
                    "            \"pincer:plugin/{interface}@{version}\": crate::wit::host::pincer::plugin::{},",
                    interface.replace('-', "_")
                )?;
            }
            writeln!(out, "        }},")?;
        }
        writeln!(out, "    }});\n}}")?;
    }
    let path = PathBuf::from(std::env::var("OUT_DIR")?).join("bindings.rs");
    std::fs::write(path, out)?;
    Ok(())
}

fn package_version(worlds: &str) -> Option<&str> {
    worlds.lines().find_map(|line| {
        line.trim()
            .strip_prefix("package pincer:plugin@")?
            .strip_suffix(';')
    })
}

/// The interfaces `world` imports: its `import x;` lines, plus `types`,
/// which every world uses through its export.
fn world_imports(worlds: &str, world: &str) -> Result<Vec<String>, Box<dyn Error>> {
    let start = format!("world {world} {{");
    let body = worlds
        .split_once(&start)
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split_once('}'))
        .map(|(body, _)| body)
        .ok_or_else(|| format!("wit/worlds.wit has no world `{world}`"))?;
    let mut imports = vec!["types".to_string()];
    for line in body.lines() {
        if let Some(name) = line
            .trim()
            .strip_prefix("import ")
            .and_then(|r| r.strip_suffix(';'))
        {
            imports.push(name.trim().to_string());
        }
    }
    Ok(imports)
}
