//! Unit conversion for length, mass and temperature.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dimension {
    Length,
    Mass,
    Temperature,
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dimension::Length => "length",
            Dimension::Mass => "mass",
            Dimension::Temperature => "temperature",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    pub symbol: &'static str,
    pub dimension: Dimension,
    /// Linear units: size in metres or kilograms. Temperatures: unused.
    factor: f64,
}

const fn unit(symbol: &'static str, dimension: Dimension, factor: f64) -> Unit {
    Unit {
        symbol,
        dimension,
        factor,
    }
}

pub const UNITS: &[Unit] = &[
    unit("m", Dimension::Length, 1.0),
    unit("km", Dimension::Length, 1000.0),
    unit("cm", Dimension::Length, 0.01),
    unit("mm", Dimension::Length, 0.001),
    unit("mi", Dimension::Length, 1609.344),
    unit("ft", Dimension::Length, 0.3048),
    unit("in", Dimension::Length, 0.0254),
    unit("kg", Dimension::Mass, 1.0),
    unit("g", Dimension::Mass, 0.001),
    unit("lb", Dimension::Mass, 0.453_592_37),
    unit("oz", Dimension::Mass, 0.028_349_523_125),
    unit("c", Dimension::Temperature, 1.0),
    unit("f", Dimension::Temperature, 1.0),
    unit("k", Dimension::Temperature, 1.0),
];

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// `field` is the argument that named the unit (`from` or `to`).
    UnknownUnit {
        field: &'static str,
        unit: String,
    },
    Incompatible {
        from: Dimension,
        to: Dimension,
    },
    BelowAbsoluteZero,
    NonFinite,
}

impl Error {
    /// Whether the arguments themselves are wrong (as opposed to the value).
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Error::UnknownUnit { .. } | Error::Incompatible { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownUnit { field, unit } => {
                let known: Vec<&str> = UNITS.iter().map(|u| u.symbol).collect();
                write!(
                    f,
                    "{field}: unknown unit `{unit}` (known: {})",
                    known.join(", ")
                )
            }
            Error::Incompatible { from, to } => write!(f, "cannot convert {from} to {to}"),
            Error::BelowAbsoluteZero => f.write_str("temperature is below absolute zero"),
            Error::NonFinite => f.write_str("the result is not a finite number"),
        }
    }
}

impl std::error::Error for Error {}

/// Looks a unit up by symbol, ignoring case.
pub fn find(symbol: &str, field: &'static str) -> Result<Unit, Error> {
    UNITS
        .iter()
        .find(|u| u.symbol.eq_ignore_ascii_case(symbol.trim()))
        .copied()
        .ok_or_else(|| Error::UnknownUnit {
            field,
            unit: symbol.to_owned(),
        })
}

/// Converts `value` from one unit to another of the same dimension.
pub fn convert(value: f64, from: Unit, to: Unit) -> Result<f64, Error> {
    if from.dimension != to.dimension {
        return Err(Error::Incompatible {
            from: from.dimension,
            to: to.dimension,
        });
    }
    let result = match from.dimension {
        Dimension::Temperature => {
            let kelvin = to_kelvin(value, from.symbol);
            if kelvin < 0.0 {
                return Err(Error::BelowAbsoluteZero);
            }
            from_kelvin(kelvin, to.symbol)
        }
        Dimension::Length | Dimension::Mass => value * from.factor / to.factor,
    };
    if result.is_finite() {
        Ok(result)
    } else {
        Err(Error::NonFinite)
    }
}

fn to_kelvin(value: f64, symbol: &str) -> f64 {
    match symbol {
        "c" => value + 273.15,
        "f" => (value - 32.0) * 5.0 / 9.0 + 273.15,
        _ => value,
    }
}

fn from_kelvin(kelvin: f64, symbol: &str) -> f64 {
    match symbol {
        "c" => kelvin - 273.15,
        "f" => (kelvin - 273.15) * 9.0 / 5.0 + 32.0,
        _ => kelvin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(value: f64, from: &str, to: &str) -> Result<f64, Error> {
        convert(value, find(from, "from")?, find(to, "to")?)
    }

    fn assert_conv(value: f64, from: &str, to: &str, expected: f64) {
        let got = conv(value, from, to).unwrap_or_else(|err| panic!("{from}->{to}: {err}"));
        assert!(
            (got - expected).abs() <= 1e-9 * expected.abs().max(1.0),
            "{value} {from} -> {to}: got {got}, expected {expected}"
        );
    }

    #[test]
    fn length() {
        assert_conv(1.0, "km", "m", 1000.0);
        assert_conv(1.0, "mi", "km", 1.609344);
        assert_conv(12.0, "in", "ft", 1.0);
        assert_conv(1.0, "ft", "cm", 30.48);
        assert_conv(5.0, "mm", "cm", 0.5);
    }

    #[test]
    fn mass() {
        assert_conv(1.0, "lb", "g", 453.59237);
        assert_conv(16.0, "oz", "lb", 1.0);
        assert_conv(2.5, "kg", "g", 2500.0);
    }

    #[test]
    fn temperature() {
        assert_conv(100.0, "c", "f", 212.0);
        assert_conv(32.0, "f", "c", 0.0);
        assert_conv(0.0, "k", "c", -273.15);
        assert_conv(-40.0, "f", "c", -40.0);
        assert_conv(20.0, "C", "K", 293.15);
        assert_eq!(conv(-300.0, "c", "k"), Err(Error::BelowAbsoluteZero));
    }

    #[test]
    fn errors() {
        assert_eq!(
            conv(1.0, "m", "kg"),
            Err(Error::Incompatible {
                from: Dimension::Length,
                to: Dimension::Mass
            })
        );
        let err = conv(1.0, "parsec", "m").expect_err("unknown unit");
        assert!(err.is_invalid_input());
        assert!(
            err.to_string().starts_with("from: unknown unit `parsec`"),
            "{err}"
        );
        assert!(matches!(
            conv(1.0, "m", "yd"),
            Err(Error::UnknownUnit { field: "to", .. })
        ));
        assert_eq!(conv(f64::MAX, "km", "mm"), Err(Error::NonFinite));
    }
}
