//! Where the configuration file and pincer's state live.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::error::ConfigError;

/// File name looked up in the current directory and in the pincer home.
pub const CONFIG_FILE_NAME: &str = "pincer.yaml";

/// Picks the configuration file:
/// 1. `cli` (the `--config` flag), whether or not it exists (loading reports
///    a missing file);
/// 2. `$PINCER_CONFIG`, likewise;
/// 3. `./pincer.yaml` if it exists;
/// 4. `pincer.yaml` in the pincer home (`$PINCER_HOME`, else `~/.pincer`) if
///    it exists (the home is not created here);
/// 5. `None`: use the embedded [`super::DEFAULT_CONFIG`].
pub fn resolve_config_path(cli: Option<&Path>) -> Option<PathBuf> {
    resolve_with(
        cli,
        &|name| std::env::var_os(name),
        Path::new("."),
        dirs::home_dir().as_deref(),
    )
}

fn resolve_with(
    cli: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
    cwd: &Path,
    user_home: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(path) = cli {
        return Some(path.to_path_buf());
    }
    if let Some(path) = env("PINCER_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let local = cwd.join(CONFIG_FILE_NAME);
    if local.is_file() {
        return Some(local);
    }
    let home = home_dir_with(env, user_home)?.join(CONFIG_FILE_NAME);
    home.is_file().then_some(home)
}

/// `$PINCER_HOME` (with `~` expanded) or `~/.pincer`, without creating it.
fn home_dir_with(
    env: &dyn Fn(&str) -> Option<OsString>,
    user_home: Option<&Path>,
) -> Option<PathBuf> {
    match env("PINCER_HOME").filter(|p| !p.is_empty()) {
        Some(path) => Some(expand_tilde_with(Path::new(&path), user_home)),
        None => user_home.map(|home| home.join(".pincer")),
    }
}

/// The pincer home (state folder): `$PINCER_HOME`, else `~/.pincer`; created
/// (mode 0700 on Unix) if missing.
///
/// # Errors
/// [`ConfigError::Home`] when the user's home is unknown (and `PINCER_HOME`
/// unset) or the folder cannot be created.
pub fn pincer_home() -> Result<PathBuf, ConfigError> {
    let user_home = dirs::home_dir();
    let Some(path) = home_dir_with(&|name| std::env::var_os(name), user_home.as_deref()) else {
        return Err(ConfigError::Home {
            path: PathBuf::from("~/.pincer"),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the user's home directory is unknown; set PINCER_HOME",
            ),
        });
    };
    create_dir(&path)?;
    Ok(path)
}

fn create_dir(path: &Path) -> Result<(), ConfigError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path).map_err(|source| ConfigError::Home {
        path: path.to_path_buf(),
        source,
    })
}

/// Expands a leading `~` (alone or followed by `/`) to the user's home
/// directory; other paths, and all paths when the home is unknown, are
/// returned unchanged.
pub fn expand_tilde(path: &Path) -> PathBuf {
    expand_tilde_with(path, dirs::home_dir().as_deref())
}

fn expand_tilde_with(path: &Path, user_home: Option<&Path>) -> PathBuf {
    let Some(home) = user_home else {
        return path.to_path_buf();
    };
    match path.strip_prefix("~") {
        Ok(rest) if rest.as_os_str().is_empty() => home.to_path_buf(),
        Ok(rest) => home.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    #[test]
    fn tilde() {
        let home = Some(Path::new("/home/u"));
        assert_eq!(
            expand_tilde_with(Path::new("~"), home),
            PathBuf::from("/home/u")
        );
        assert_eq!(
            expand_tilde_with(Path::new("~/notes"), home),
            PathBuf::from("/home/u/notes")
        );
        assert_eq!(
            expand_tilde_with(Path::new("~other/x"), home),
            PathBuf::from("~other/x")
        );
        assert_eq!(
            expand_tilde_with(Path::new("/abs/~"), home),
            PathBuf::from("/abs/~")
        );
        assert_eq!(
            expand_tilde_with(Path::new("~/x"), None),
            PathBuf::from("~/x")
        );
    }

    #[test]
    fn resolution_order() {
        let cwd = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let pincer_home = home.path().join(".pincer");
        std::fs::create_dir_all(&pincer_home).unwrap();
        let user_home = Some(home.path());

        // nothing exists: embedded defaults
        assert_eq!(resolve_with(None, &no_env, cwd.path(), user_home), None);

        // ~/.pincer/pincer.yaml
        std::fs::write(pincer_home.join(CONFIG_FILE_NAME), "").unwrap();
        assert_eq!(
            resolve_with(None, &no_env, cwd.path(), user_home),
            Some(pincer_home.join(CONFIG_FILE_NAME))
        );

        // $PINCER_HOME/pincer.yaml replaces ~/.pincer
        let other = tempfile::tempdir().unwrap();
        let other_path = other.path().as_os_str().to_owned();
        let env_home = move |name: &str| (name == "PINCER_HOME").then(|| other_path.clone());
        assert_eq!(resolve_with(None, &env_home, cwd.path(), user_home), None);
        std::fs::write(other.path().join(CONFIG_FILE_NAME), "").unwrap();
        assert_eq!(
            resolve_with(None, &env_home, cwd.path(), user_home),
            Some(other.path().join(CONFIG_FILE_NAME))
        );

        // ./pincer.yaml wins over the home
        std::fs::write(cwd.path().join(CONFIG_FILE_NAME), "").unwrap();
        assert_eq!(
            resolve_with(None, &env_home, cwd.path(), user_home),
            Some(cwd.path().join(CONFIG_FILE_NAME))
        );

        // $PINCER_CONFIG wins over ./pincer.yaml, even if missing
        let env_config = |name: &str| (name == "PINCER_CONFIG").then(|| OsString::from("/x.yaml"));
        assert_eq!(
            resolve_with(None, &env_config, cwd.path(), user_home),
            Some(PathBuf::from("/x.yaml"))
        );

        // --config wins over everything
        assert_eq!(
            resolve_with(
                Some(Path::new("cli.yaml")),
                &env_config,
                cwd.path(),
                user_home
            ),
            Some(PathBuf::from("cli.yaml"))
        );
    }

    #[test]
    fn creates_home_or_explains() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("a/b/.pincer");
        create_dir(&home).unwrap();
        assert!(home.is_dir());
        create_dir(&home).unwrap(); // already there: fine

        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = create_dir(&file.join("sub")).unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.starts_with(&format!(
                "cannot create pincer home directory {}",
                file.join("sub").display()
            )),
            "{shown}"
        );
    }
}
