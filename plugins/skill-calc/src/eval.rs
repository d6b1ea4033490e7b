//! A small recursive-descent evaluator for arithmetic expressions.
//!
//! Grammar (lowest precedence first):
//!
//! ```text
//! expr    = term (("+" | "-") term)*
//! term    = unary (("*" | "/" | "%") unary)*
//! unary   = ("-" | "+") unary | power
//! power   = primary ("^" unary)?          -- right-associative, binds tighter than unary minus
//! primary = number | constant | function "(" expr ("," expr)* ")" | "(" expr ")"
//! ```

use std::fmt;

/// Longest accepted expression, in characters.
pub const MAX_LEN: usize = 4096;
/// Deepest nesting of parentheses and unary operators; keeps recursion bounded.
const MAX_DEPTH: usize = 200;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    TooLong(usize),
    TooDeep,
    /// `position` is a 1-based character position.
    Syntax {
        position: usize,
        message: String,
    },
    UnknownIdentifier {
        position: usize,
        name: String,
    },
    Arity {
        name: &'static str,
        expected: usize,
        got: usize,
    },
    DivisionByZero,
    /// An operation produced NaN or an infinity (domain error or overflow).
    NonFinite(&'static str),
}

impl Error {
    /// Whether the expression itself is malformed (as opposed to failing to evaluate).
    pub fn is_invalid_input(&self) -> bool {
        !matches!(self, Error::DivisionByZero | Error::NonFinite(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::TooLong(len) => write!(
                f,
                "expression is {len} characters long; at most {MAX_LEN} are accepted"
            ),
            Error::TooDeep => write!(f, "expression is nested more than {MAX_DEPTH} levels deep"),
            Error::Syntax { position, message } => {
                write!(f, "syntax error at position {position}: {message}")
            }
            Error::UnknownIdentifier { position, name } => {
                write!(f, "unknown identifier `{name}` at position {position}")
            }
            Error::Arity {
                name,
                expected,
                got,
            } => write!(
                f,
                "function `{name}` takes {expected} argument(s), {got} given"
            ),
            Error::DivisionByZero => write!(f, "division by zero"),
            Error::NonFinite(op) => write!(
                f,
                "`{op}` produced a non-finite result (domain error or overflow)"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Evaluates `input` to a finite number.
pub fn evaluate(input: &str) -> Result<f64, Error> {
    let len = input.chars().count();
    if len > MAX_LEN {
        return Err(Error::TooLong(len));
    }
    let tokens = tokenize(input)?;
    let mut parser = Parser {
        tokens: &tokens,
        pos: 0,
        depth: 0,
        end: len + 1,
    };
    let value = parser.expr()?;
    if let Some(token) = parser.peek() {
        return Err(syntax(token.position, format!("unexpected {}", token.kind)));
    }
    // Normalise -0 so callers never print "-0".
    Ok(if value == 0.0 { 0.0 } else { value })
}

#[derive(Debug, Clone, PartialEq)]
enum TokenKind {
    Number(f64),
    Ident(String),
    Op(char),
    LParen,
    RParen,
    Comma,
}

impl fmt::Display for TokenKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenKind::Number(n) => write!(f, "number {n}"),
            TokenKind::Ident(name) => write!(f, "identifier `{name}`"),
            TokenKind::Op(op) => write!(f, "operator `{op}`"),
            TokenKind::LParen => f.write_str("`(`"),
            TokenKind::RParen => f.write_str("`)`"),
            TokenKind::Comma => f.write_str("`,`"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: TokenKind,
    /// 1-based character position of the token's first character.
    position: usize,
}

fn syntax(position: usize, message: impl Into<String>) -> Error {
    Error::Syntax {
        position,
        message: message.into(),
    }
}

fn tokenize(input: &str) -> Result<Vec<Token>, Error> {
    let chars: Vec<char> = input.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let position = i + 1;
        let kind = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '0'..='9' | '.' => {
                let (number, next) = scan_number(&chars, i)?;
                i = next;
                tokens.push(Token {
                    kind: TokenKind::Number(number),
                    position,
                });
                continue;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                tokens.push(Token {
                    kind: TokenKind::Ident(chars[start..i].iter().collect()),
                    position,
                });
                continue;
            }
            '+' | '-' | '*' | '/' | '%' | '^' => TokenKind::Op(c),
            '(' => TokenKind::LParen,
            ')' => TokenKind::RParen,
            ',' => TokenKind::Comma,
            other => return Err(syntax(position, format!("unexpected character `{other}`"))),
        };
        tokens.push(Token { kind, position });
        i += 1;
    }
    Ok(tokens)
}

/// Scans a decimal number (`12`, `1.5`, `.5`, `2.`, `1e-3`) starting at `start`;
/// returns it and the index just past it.
fn scan_number(chars: &[char], start: usize) -> Result<(f64, usize), Error> {
    let digits = |mut i: usize| {
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let mut i = digits(start);
    if chars.get(i) == Some(&'.') {
        i = digits(i + 1);
    }
    // An exponent only when digits follow, so that `2e` stays "2" then `e`.
    if matches!(chars.get(i), Some('e' | 'E')) {
        let sign = usize::from(matches!(chars.get(i + 1), Some('+' | '-')));
        if chars.get(i + 1 + sign).is_some_and(char::is_ascii_digit) {
            i = digits(i + 1 + sign);
        }
    }
    if chars.get(i) == Some(&'.') {
        i += 1;
    }
    let text: String = chars[start..i].iter().collect();
    match text.parse::<f64>() {
        Ok(number) if number.is_finite() => Ok((number, i)),
        Ok(_) => Err(syntax(
            start + 1,
            format!("number `{text}` is out of range"),
        )),
        Err(_) => Err(syntax(start + 1, format!("invalid number `{text}`"))),
    }
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    depth: usize,
    /// Position reported for "unexpected end of expression".
    end: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        token
    }

    fn eat_op(&mut self, ops: &[char]) -> Option<char> {
        match self.peek() {
            Some(Token {
                kind: TokenKind::Op(op),
                ..
            }) if ops.contains(op) => {
                let op = *op;
                self.pos += 1;
                Some(op)
            }
            _ => None,
        }
    }

    fn expect(&mut self, expected: &TokenKind, what: &str) -> Result<(), Error> {
        match self.next() {
            Some(token) if &token.kind == expected => Ok(()),
            Some(token) => Err(syntax(
                token.position,
                format!("expected {what}, found {}", token.kind),
            )),
            None => Err(syntax(
                self.end,
                format!("expected {what}, found end of expression"),
            )),
        }
    }

    fn descend(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Error::TooDeep);
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<f64, Error> {
        let mut value = self.term()?;
        while let Some(op) = self.eat_op(&['+', '-']) {
            let rhs = self.term()?;
            value = match op {
                '+' => finite(value + rhs, "+")?,
                _ => finite(value - rhs, "-")?,
            };
        }
        Ok(value)
    }

    fn term(&mut self) -> Result<f64, Error> {
        let mut value = self.unary()?;
        while let Some(op) = self.eat_op(&['*', '/', '%']) {
            let rhs = self.unary()?;
            value = match op {
                '*' => finite(value * rhs, "*")?,
                _ if rhs == 0.0 => return Err(Error::DivisionByZero),
                '/' => finite(value / rhs, "/")?,
                _ => finite(value % rhs, "%")?,
            };
        }
        Ok(value)
    }

    fn unary(&mut self) -> Result<f64, Error> {
        match self.eat_op(&['-', '+']) {
            Some(op) => {
                self.descend()?;
                let value = self.unary()?;
                self.depth -= 1;
                Ok(if op == '-' { -value } else { value })
            }
            None => self.power(),
        }
    }

    fn power(&mut self) -> Result<f64, Error> {
        let base = self.primary()?;
        if self.eat_op(&['^']).is_none() {
            return Ok(base);
        }
        self.descend()?;
        let exponent = self.unary()?;
        self.depth -= 1;
        finite(base.powf(exponent), "^")
    }

    fn primary(&mut self) -> Result<f64, Error> {
        let Some(token) = self.next() else {
            return Err(syntax(self.end, "unexpected end of expression"));
        };
        match token.kind {
            TokenKind::Number(number) => Ok(number),
            TokenKind::LParen => {
                self.descend()?;
                let value = self.expr()?;
                self.expect(&TokenKind::RParen, "`)`")?;
                self.depth -= 1;
                Ok(value)
            }
            TokenKind::Ident(name) => self.identifier(&name, token.position),
            other => Err(syntax(token.position, format!("unexpected {other}"))),
        }
    }

    fn identifier(&mut self, name: &str, position: usize) -> Result<f64, Error> {
        let lower = name.to_ascii_lowercase();
        if let Some(value) = constant(&lower) {
            return Ok(value);
        }
        let Some(function) = Function::from_name(&lower) else {
            return Err(Error::UnknownIdentifier {
                position,
                name: name.to_owned(),
            });
        };
        self.expect(&TokenKind::LParen, &format!("`(` after `{lower}`"))?;
        self.descend()?;
        let args = self.arguments()?;
        self.depth -= 1;
        function.apply(&args)
    }

    /// Comma-separated expressions up to and including the closing `)`.
    fn arguments(&mut self) -> Result<Vec<f64>, Error> {
        let mut args = vec![self.expr()?];
        loop {
            match self.next() {
                Some(Token {
                    kind: TokenKind::Comma,
                    ..
                }) => args.push(self.expr()?),
                Some(Token {
                    kind: TokenKind::RParen,
                    ..
                }) => return Ok(args),
                Some(token) => {
                    return Err(syntax(
                        token.position,
                        format!("expected `,` or `)`, found {}", token.kind),
                    ));
                }
                None => return Err(syntax(self.end, "expected `)`, found end of expression")),
            }
        }
    }
}

fn finite(value: f64, op: &'static str) -> Result<f64, Error> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Error::NonFinite(op))
    }
}

fn constant(name: &str) -> Option<f64> {
    match name {
        "pi" => Some(std::f64::consts::PI),
        "e" => Some(std::f64::consts::E),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy)]
enum Function {
    Unary(&'static str, fn(f64) -> f64),
    Binary(&'static str, fn(f64, f64) -> f64),
}

impl Function {
    fn from_name(name: &str) -> Option<Self> {
        let unary = |name, f| Some(Function::Unary(name, f));
        match name {
            "sqrt" => unary("sqrt", f64::sqrt),
            "abs" => unary("abs", f64::abs),
            "ln" => unary("ln", f64::ln),
            "log10" => unary("log10", f64::log10),
            "sin" => unary("sin", f64::sin),
            "cos" => unary("cos", f64::cos),
            "tan" => unary("tan", f64::tan),
            "round" => unary("round", f64::round),
            "floor" => unary("floor", f64::floor),
            "ceil" => unary("ceil", f64::ceil),
            "min" => Some(Function::Binary("min", f64::min)),
            "max" => Some(Function::Binary("max", f64::max)),
            _ => None,
        }
    }

    fn apply(self, args: &[f64]) -> Result<f64, Error> {
        match (self, args) {
            (Function::Unary(name, f), &[x]) => finite(f(x), name),
            (Function::Binary(name, f), &[a, b]) => finite(f(a, b), name),
            (Function::Unary(name, _), _) => Err(Error::Arity {
                name,
                expected: 1,
                got: args.len(),
            }),
            (Function::Binary(name, _), _) => Err(Error::Arity {
                name,
                expected: 2,
                got: args.len(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(input: &str) -> f64 {
        evaluate(input).unwrap_or_else(|err| panic!("{input}: {err}"))
    }

    fn assert_close(input: &str, expected: f64) {
        let got = eval(input);
        assert!(
            (got - expected).abs() <= 1e-9 * expected.abs().max(1.0),
            "{input}: got {got}, expected {expected}"
        );
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(eval("1 + 2 * 3"), 7.0);
        assert_eq!(eval("(1 + 2) * 3"), 9.0);
        assert_eq!(eval("10 - 4 - 3"), 3.0);
        assert_eq!(eval("100 / 10 / 5"), 2.0);
        assert_eq!(eval("2 ^ 3 ^ 2"), 512.0);
        assert_eq!(eval("7 % 4"), 3.0);
        assert_eq!(eval("2 * 3 % 4"), 2.0);
    }

    #[test]
    fn unary_operators() {
        assert_eq!(eval("-2 ^ 2"), -4.0);
        assert_eq!(eval("(-2) ^ 2"), 4.0);
        assert_eq!(eval("2 ^ -1"), 0.5);
        assert_eq!(eval("--3"), 3.0);
        assert_eq!(eval("+3 - -3"), 6.0);
        assert_eq!(eval("-0"), 0.0);
        assert!(eval("-0").is_sign_positive());
    }

    #[test]
    fn numbers() {
        assert_eq!(eval("1.5"), 1.5);
        assert_eq!(eval(".5"), 0.5);
        assert_eq!(eval("2."), 2.0);
        assert_eq!(eval("1e3"), 1000.0);
        assert_eq!(eval("2.5E-1"), 0.25);
        assert!(matches!(
            evaluate("1.2.3"),
            Err(Error::Syntax { position: 1, .. })
        ));
        assert!(matches!(evaluate("."), Err(Error::Syntax { .. })));
        assert!(matches!(
            evaluate("min(1e999, 1)"),
            Err(Error::Syntax { position: 5, .. })
        ));
        // `2e` is the number 2 followed by the constant e: no implicit multiplication.
        assert!(matches!(
            evaluate("2e"),
            Err(Error::Syntax { position: 2, .. })
        ));
    }

    #[test]
    fn constants_and_functions() {
        assert_close("pi", std::f64::consts::PI);
        assert_close("e", std::f64::consts::E);
        assert_close("PI * 2", std::f64::consts::TAU);
        assert_eq!(eval("sqrt(16)"), 4.0);
        assert_eq!(eval("abs(-3)"), 3.0);
        assert_close("ln(e)", 1.0);
        assert_eq!(eval("log10(1000)"), 3.0);
        assert_close("sin(pi / 2)", 1.0);
        assert_close("cos(0)", 1.0);
        assert_close("tan(pi / 4)", 1.0);
        assert_eq!(eval("min(3, -2)"), -2.0);
        assert_eq!(eval("max(3, 1 + 4)"), 5.0);
        assert_eq!(eval("round(2.5)"), 3.0);
        assert_eq!(eval("floor(-1.5)"), -2.0);
        assert_eq!(eval("ceil(1.2)"), 2.0);
        assert_eq!(eval("sqrt(max(9, 4)) ^ 2"), 9.0);
    }

    #[test]
    fn evaluation_errors() {
        assert_eq!(evaluate("1 / 0"), Err(Error::DivisionByZero));
        assert_eq!(evaluate("1 % (2 - 2)"), Err(Error::DivisionByZero));
        assert_eq!(evaluate("sqrt(-1)"), Err(Error::NonFinite("sqrt")));
        assert_eq!(evaluate("ln(0)"), Err(Error::NonFinite("ln")));
        assert_eq!(evaluate("10 ^ 400"), Err(Error::NonFinite("^")));
        // NaN must not be swallowed by min/max.
        assert_eq!(evaluate("min(sqrt(-1), 1)"), Err(Error::NonFinite("sqrt")));
        assert!(!Error::DivisionByZero.is_invalid_input());
    }

    #[test]
    fn input_errors() {
        assert_eq!(
            evaluate("2 * foo"),
            Err(Error::UnknownIdentifier {
                position: 5,
                name: "foo".into()
            })
        );
        assert!(matches!(
            evaluate("1 +"),
            Err(Error::Syntax { position: 4, .. })
        ));
        assert!(matches!(
            evaluate("(1 + 2"),
            Err(Error::Syntax { position: 7, .. })
        ));
        assert!(matches!(
            evaluate("1 + 2)"),
            Err(Error::Syntax { position: 6, .. })
        ));
        assert!(matches!(
            evaluate("1 $ 2"),
            Err(Error::Syntax { position: 3, .. })
        ));
        assert!(matches!(
            evaluate(""),
            Err(Error::Syntax { position: 1, .. })
        ));
        assert!(matches!(
            evaluate("sqrt 4"),
            Err(Error::Syntax { position: 6, .. })
        ));
        assert!(matches!(
            evaluate("pi(2)"),
            Err(Error::Syntax { position: 3, .. })
        ));
        assert!(matches!(
            evaluate("min(1)"),
            Err(Error::Arity {
                name: "min",
                expected: 2,
                got: 1
            })
        ));
        assert!(matches!(
            evaluate("sqrt(1, 2)"),
            Err(Error::Arity { name: "sqrt", .. })
        ));
        let err = evaluate("1 +").expect_err("syntax error");
        assert!(err.is_invalid_input());
        assert!(err.to_string().contains("position 4"), "{err}");
    }

    #[test]
    fn limits() {
        let long = "1+".repeat(MAX_LEN / 2) + "1";
        assert_eq!(evaluate(&long), Err(Error::TooLong(MAX_LEN + 1)));
        let fits = "1+".repeat(MAX_LEN / 2 - 1) + "1";
        assert_eq!(eval(&fits), (MAX_LEN / 2) as f64);
        let nested = "(".repeat(2000) + "1" + &")".repeat(2000);
        assert_eq!(evaluate(&nested), Err(Error::TooDeep));
        assert_eq!(evaluate(&"-".repeat(4000)), Err(Error::TooDeep));
        assert_eq!(evaluate(&"2^".repeat(1000)), Err(Error::TooDeep));
        let ok_nesting = "(".repeat(100) + "1" + &")".repeat(100);
        assert_eq!(eval(&ok_nesting), 1.0);
    }
}
