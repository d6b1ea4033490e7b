//! `pincer-agent`: the in-container agent runner of pincer.
//!
//! `serve` runs as PID 1 of a workspace container and executes commands for
//! the host over a unix socket (see the `pincer-runner-protocol` crate);
//! `exec` and `ping` are small clients for debugging with `docker exec`.

mod cancel;
mod capture;
mod client;
mod egress;
mod exec;
mod policy;
mod reap;
mod serve;
mod turn;

use std::path::PathBuf;

use pincer_runner_protocol::{ExecRequest, TurnLimits, TurnRequest};

const USAGE: &str = "\
usage:
  pincer-agent serve [--socket PATH]
      run the agent runner (PID 1 of a workspace container); the policy is
      read from $PINCER_RUNNER_POLICY (JSON)
  pincer-agent exec [--socket PATH] [--timeout-ms N] [--cwd DIR] [--] CMD [ARGS...]
      run CMD through a running runner; exits with its status
      (128+signal if killed, 124 timeout, 126 refused, 127 not found)
  pincer-agent ping [--socket PATH]
      print the runner's status as JSON
  pincer-agent turn [--socket PATH] --model MODEL [--no-gateway-tools] --text TEXT
      run one agent turn through a running runner and print its events as
      JSON lines (exit 0 when it is done, 1 when it failed)
  pincer-agent --version

The socket defaults to /run/pincer/runner/runner.sock.";

#[derive(Debug, PartialEq, Eq)]
enum Cli {
    Serve {
        socket: PathBuf,
    },
    Exec {
        socket: PathBuf,
        request: ExecRequest,
    },
    Ping {
        socket: PathBuf,
    },
    Turn {
        socket: PathBuf,
        request: TurnRequest,
    },
    Version,
    Help,
}

/// Options of the form `--name VALUE` or `--name=VALUE`.
fn option_value(
    arg: &str,
    name: &str,
    rest: &mut impl Iterator<Item = String>,
) -> Result<Option<String>, String> {
    if arg == name {
        return rest
            .next()
            .map(Some)
            .ok_or_else(|| format!("{name} needs a value"));
    }
    Ok(arg
        .strip_prefix(name)
        .and_then(|v| v.strip_prefix('='))
        .map(str::to_string))
}

fn parse(args: Vec<String>) -> Result<Cli, String> {
    let mut args = args.into_iter();
    let Some(command) = args.next() else {
        return Err("missing subcommand".into());
    };
    let mut socket = serve::default_socket();
    match command.as_str() {
        "--version" | "-V" | "version" => Ok(Cli::Version),
        "--help" | "-h" | "help" => Ok(Cli::Help),
        "serve" | "ping" => {
            while let Some(arg) = args.next() {
                match option_value(&arg, "--socket", &mut args)? {
                    Some(value) => socket = PathBuf::from(value),
                    None => return Err(format!("{command}: unexpected argument {arg:?}")),
                }
            }
            Ok(if command == "serve" {
                Cli::Serve { socket }
            } else {
                Cli::Ping { socket }
            })
        }
        "exec" => {
            let mut request = ExecRequest::new(Vec::<String>::new());
            while let Some(arg) = args.next() {
                if arg == "--" {
                    break;
                }
                if !arg.starts_with("--") {
                    request.argv.push(arg);
                    break;
                }
                if let Some(value) = option_value(&arg, "--socket", &mut args)? {
                    socket = PathBuf::from(value);
                } else if let Some(value) = option_value(&arg, "--timeout-ms", &mut args)? {
                    request.timeout_ms =
                        value.parse().ok().filter(|&ms| ms > 0).ok_or_else(|| {
                            format!("--timeout-ms: not a positive number: {value:?}")
                        })?;
                } else if let Some(value) = option_value(&arg, "--cwd", &mut args)? {
                    request.cwd = Some(value);
                } else {
                    return Err(format!("exec: unknown option {arg:?}"));
                }
            }
            request.argv.extend(args);
            if request.argv.is_empty() {
                return Err("exec: missing command".into());
            }
            Ok(Cli::Exec { socket, request })
        }
        "turn" => {
            let mut model = None;
            let mut text = None;
            let mut gateway_tools = true;
            while let Some(arg) = args.next() {
                if let Some(value) = option_value(&arg, "--socket", &mut args)? {
                    socket = PathBuf::from(value);
                } else if let Some(value) = option_value(&arg, "--model", &mut args)? {
                    model = Some(value);
                } else if let Some(value) = option_value(&arg, "--text", &mut args)? {
                    text = Some(value);
                } else if arg == "--no-gateway-tools" {
                    gateway_tools = false;
                } else {
                    return Err(format!("turn: unexpected argument {arg:?}"));
                }
            }
            let model = model.ok_or("turn: --model is required")?;
            let text = text.ok_or("turn: --text is required")?;
            let request = TurnRequest {
                turn_id: format!("cli-{}", std::process::id()),
                model,
                messages: vec![serde_json::json!({"role": "user", "content": text})],
                limits: TurnLimits::default(),
                gateway_tools,
                checked: false,
                resume: None,
            };
            Ok(Cli::Turn { socket, request })
        }
        other => Err(format!("unknown subcommand {other:?}")),
    }
}

fn main() {
    let args: Vec<String> = match std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect::<Result<_, _>>()
    {
        Ok(args) => args,
        Err(bad) => {
            eprintln!("pincer-agent: argument is not UTF-8: {bad:?}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let code = match parse(args) {
        Err(e) => {
            eprintln!("pincer-agent: {e}\n\n{USAGE}");
            2
        }
        Ok(Cli::Help) => {
            println!("{USAGE}");
            0
        }
        Ok(Cli::Version) => {
            println!("pincer-agent {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Ok(Cli::Ping { socket }) => client::ping(&socket),
        Ok(Cli::Exec { socket, request }) => client::exec(&socket, request),
        Ok(Cli::Turn { socket, request }) => client::turn(&socket, request),
        Ok(Cli::Serve { socket }) => match serve::serve(&socket) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("pincer-agent: {e}");
                match e {
                    serve::ServeError::Policy(_) => 2,
                    serve::ServeError::Setup(_) => 1,
                }
            }
        },
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_subcommands() {
        assert_eq!(
            parse(args(&["serve"])).unwrap(),
            Cli::Serve {
                socket: PathBuf::from("/run/pincer/runner/runner.sock")
            }
        );
        assert_eq!(
            parse(args(&["serve", "--socket", "/tmp/r.sock"])).unwrap(),
            Cli::Serve {
                socket: PathBuf::from("/tmp/r.sock")
            }
        );
        assert_eq!(
            parse(args(&["ping", "--socket=/x"])).unwrap(),
            Cli::Ping {
                socket: PathBuf::from("/x")
            }
        );
        assert_eq!(parse(args(&["--version"])).unwrap(), Cli::Version);
        assert!(parse(args(&[])).is_err());
        assert!(parse(args(&["serve", "extra"])).is_err());
        assert!(parse(args(&["serve", "--socket"])).is_err());
        assert!(parse(args(&["launch"])).is_err());
    }

    #[test]
    fn parses_exec() {
        let Cli::Exec { socket, request } = parse(args(&[
            "exec",
            "--socket",
            "/s",
            "--timeout-ms=500",
            "--cwd",
            "/tmp",
            "--",
            "sh",
            "-c",
            "--not-an-option",
        ]))
        .unwrap() else {
            panic!("not exec")
        };
        assert_eq!(socket, PathBuf::from("/s"));
        assert_eq!(request.argv, ["sh", "-c", "--not-an-option"]);
        assert_eq!(request.timeout_ms, 500);
        assert_eq!(request.cwd.as_deref(), Some("/tmp"));

        let Cli::Exec { request, .. } = parse(args(&["exec", "ls", "--all"])).unwrap() else {
            panic!("not exec")
        };
        assert_eq!(request.argv, ["ls", "--all"]);

        assert!(parse(args(&["exec"])).is_err());
        assert!(parse(args(&["exec", "--"])).is_err());
        assert!(parse(args(&["exec", "--timeout-ms", "0", "ls"])).is_err());
        assert!(parse(args(&["exec", "--bogus", "ls"])).is_err());
    }

    #[test]
    fn parses_turn() {
        let Cli::Turn { socket, request } = parse(args(&[
            "turn",
            "--model=fast",
            "--text",
            "hi there",
            "--no-gateway-tools",
        ]))
        .unwrap() else {
            panic!("not turn")
        };
        assert_eq!(socket, PathBuf::from("/run/pincer/runner/runner.sock"));
        assert_eq!(request.model, "fast");
        assert_eq!(
            request.messages,
            [serde_json::json!({"role": "user", "content": "hi there"})]
        );
        assert!(!request.gateway_tools);
        assert!(parse(args(&["turn", "--text", "x"])).is_err());
        assert!(parse(args(&["turn", "--model", "m"])).is_err());
        assert!(parse(args(&["turn", "--model", "m", "--text", "x", "extra"])).is_err());
    }
}
