//! The part of CEL the real engine's conditions and event filters use, evaluated over JSON:
//! literals (strings in single or double quotes, numbers, `true`, `false`, `null`, lists),
//! variables and field access (`input.user.id`, `input["user"]`), `== != < <= > >=`, `in`,
//! `&& || !`, arithmetic `+ - * / %`, parentheses, the macros `has(a.b)` and `size(x)`, and the
//! string methods `contains`, `startsWith`, `endsWith`.
//!
//! # Invariants
//!
//! 1. Evaluation never panics: a malformed expression is a parse error, a missing field or a
//!    type mismatch an evaluation error; callers treat both as "no match", as the real engine
//!    does (`hatchet-engine-semantics.md` §8.3, §10).
//! 2. An empty expression is `true` only where the caller says so ([`condition_holds`]); a
//!    filter with an empty expression never matches.
//! 3. Numbers compare by value whatever their JSON spelling (`1 == 1.0`); strings compare
//!    byte-wise; values of different kinds are unequal and unordered.

use serde_json::{Map, Value};

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExprError(pub String);

type R<T> = Result<T, ExprError>;

fn fail<T>(why: impl Into<String>) -> R<T> {
    Err(ExprError(why.into()))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Str(String),
    Ident(String),
    Op(&'static str),
}

const OPS: [&str; 22] = [
    "==", "!=", "<=", ">=", "&&", "||", "<", ">", "!", "+", "-", "*", "/", "%", "(", ")", "[", "]",
    ".", ",", "?", ":",
];

fn lex(src: &str) -> R<Vec<Tok>> {
    let s: Vec<char> = src.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < s.len() {
        let c = s[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < s.len() && (s[i].is_ascii_digit() || s[i] == '.') {
                i += 1;
            }
            // CEL's unsigned suffix.
            let text: String = s[start..i].iter().collect();
            if i < s.len() && s[i] == 'u' {
                i += 1;
            }
            out.push(Tok::Num(
                text.parse()
                    .map_err(|_| ExprError(format!("bad number {text}")))?,
            ));
        } else if c == '\'' || c == '"' {
            let mut text = String::new();
            i += 1;
            loop {
                match s.get(i) {
                    None => return fail("unterminated string"),
                    Some(&q) if q == c => break,
                    Some('\\') => {
                        i += 1;
                        match s.get(i) {
                            Some('n') => text.push('\n'),
                            Some('t') => text.push('\t'),
                            Some(&e) => text.push(e),
                            None => return fail("unterminated string"),
                        }
                    }
                    Some(&ch) => text.push(ch),
                }
                i += 1;
            }
            i += 1;
            out.push(Tok::Str(text));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(s[start..i].iter().collect()));
        } else {
            let rest: String = s[i..s.len().min(i + 2)].iter().collect();
            let Some(op) = OPS.iter().find(|op| rest.starts_with(**op)) else {
                return fail(format!("unexpected character {c:?}"));
            };
            i += op.len();
            out.push(Tok::Op(op));
        }
    }
    Ok(out)
}

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
enum Ast {
    Lit(Value),
    Var(String),
    List(Vec<Ast>),
    Field(Box<Ast>, String),
    Index(Box<Ast>, Box<Ast>),
    Unary(&'static str, Box<Ast>),
    Binary(&'static str, Box<Ast>, Box<Ast>),
    Call(Option<Box<Ast>>, String, Vec<Ast>),
    Cond(Box<Ast>, Box<Ast>, Box<Ast>),
}

/// How deep an expression may nest (parentheses, operators, calls): deeper is refused with an
/// error instead of overflowing the stack while it is parsed or evaluated.
pub(crate) const MAX_DEPTH: usize = 100;

struct Parser {
    toks: Vec<Tok>,
    at: usize,
    /// Nesting so far: open constructs, plus the operators of the chains being built (a chain
    /// `a + b + c` nests to the left).
    depth: usize,
}

impl Parser {
    fn peek_op(&self, op: &str) -> bool {
        matches!(self.toks.get(self.at), Some(Tok::Op(o)) if *o == op)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let hit = self.peek_op(op);
        if hit {
            self.at += 1;
        }
        hit
    }

    fn expect(&mut self, op: &str) -> R<()> {
        if self.eat_op(op) {
            Ok(())
        } else {
            fail(format!("expected {op:?}"))
        }
    }

    /// Enters one more level of nesting, or refuses past [`MAX_DEPTH`].
    fn deeper(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return fail(format!(
                "the expression nests deeper than {MAX_DEPTH} levels; split it into simpler conditions"
            ));
        }
        Ok(())
    }

    fn ternary(&mut self) -> R<Ast> {
        self.deeper()?;
        let r = self.ternary_inner();
        self.depth -= 1;
        r
    }

    fn ternary_inner(&mut self) -> R<Ast> {
        let c = self.or()?;
        if self.eat_op("?") {
            let a = self.ternary()?;
            self.expect(":")?;
            let b = self.ternary()?;
            return Ok(Ast::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        Ok(c)
    }

    fn binary_level(&mut self, ops: &[&'static str], next: fn(&mut Self) -> R<Ast>) -> R<Ast> {
        let entered = self.depth;
        let r = self.binary_chain(ops, next);
        self.depth = entered;
        r
    }

    fn binary_chain(&mut self, ops: &[&'static str], next: fn(&mut Self) -> R<Ast>) -> R<Ast> {
        let mut left = next(self)?;
        'outer: loop {
            for op in ops {
                if self.eat_op(op) {
                    self.deeper()?;
                    left = Ast::Binary(op, Box::new(left), Box::new(next(self)?));
                    continue 'outer;
                }
            }
            return Ok(left);
        }
    }

    fn or(&mut self) -> R<Ast> {
        self.binary_level(&["||"], Self::and)
    }

    fn and(&mut self) -> R<Ast> {
        self.binary_level(&["&&"], Self::cmp)
    }

    fn cmp(&mut self) -> R<Ast> {
        let left = self.add()?;
        for op in ["==", "!=", "<=", ">=", "<", ">"] {
            if self.eat_op(op) {
                return Ok(Ast::Binary(op, Box::new(left), Box::new(self.add()?)));
            }
        }
        if matches!(self.toks.get(self.at), Some(Tok::Ident(w)) if w == "in") {
            self.at += 1;
            return Ok(Ast::Binary("in", Box::new(left), Box::new(self.add()?)));
        }
        Ok(left)
    }

    fn add(&mut self) -> R<Ast> {
        self.binary_level(&["+", "-"], Self::mul)
    }

    fn mul(&mut self) -> R<Ast> {
        self.binary_level(&["*", "/", "%"], Self::unary)
    }

    fn unary(&mut self) -> R<Ast> {
        for op in ["!", "-"] {
            if self.eat_op(op) {
                self.deeper()?;
                let r = self.unary().map(|e| Ast::Unary(op, Box::new(e)));
                self.depth -= 1;
                return r;
            }
        }
        self.postfix()
    }

    fn args(&mut self, close: &str) -> R<Vec<Ast>> {
        let mut out = Vec::new();
        if self.eat_op(close) {
            return Ok(out);
        }
        loop {
            out.push(self.ternary()?);
            if self.eat_op(close) {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    fn postfix(&mut self) -> R<Ast> {
        let entered = self.depth;
        let r = self.postfix_chain();
        self.depth = entered;
        r
    }

    fn postfix_chain(&mut self) -> R<Ast> {
        let mut e = self.primary()?;
        loop {
            if self.peek_op(".") || self.peek_op("[") {
                self.deeper()?;
            }
            if self.eat_op(".") {
                let Some(Tok::Ident(name)) = self.toks.get(self.at).cloned() else {
                    return fail("expected a field name after '.'");
                };
                self.at += 1;
                if self.eat_op("(") {
                    let args = self.args(")")?;
                    e = Ast::Call(Some(Box::new(e)), name, args);
                } else {
                    e = Ast::Field(Box::new(e), name);
                }
            } else if self.eat_op("[") {
                let i = self.ternary()?;
                self.expect("]")?;
                e = Ast::Index(Box::new(e), Box::new(i));
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> R<Ast> {
        let Some(t) = self.toks.get(self.at).cloned() else {
            return fail("unexpected end of expression");
        };
        self.at += 1;
        match t {
            Tok::Num(n) => Ok(Ast::Lit(number(n))),
            Tok::Str(s) => Ok(Ast::Lit(Value::String(s))),
            Tok::Ident(w) => match w.as_str() {
                "true" => Ok(Ast::Lit(Value::Bool(true))),
                "false" => Ok(Ast::Lit(Value::Bool(false))),
                "null" => Ok(Ast::Lit(Value::Null)),
                _ if self.eat_op("(") => Ok(Ast::Call(None, w, self.args(")")?)),
                _ => Ok(Ast::Var(w)),
            },
            Tok::Op("(") => {
                let e = self.ternary()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Op("[") => Ok(Ast::List(self.args("]")?)),
            Tok::Op(o) => fail(format!("unexpected {o:?}")),
        }
    }
}

fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9e15 {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

/// A parsed expression, ready to evaluate against variables.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expr(Ast);

impl Expr {
    /// Parses `src`.
    pub(crate) fn parse(src: &str) -> R<Expr> {
        let mut p = Parser {
            toks: lex(src)?,
            at: 0,
            depth: 0,
        };
        let ast = p.ternary()?;
        if p.at != p.toks.len() {
            return fail("unexpected text after the expression");
        }
        Ok(Expr(ast))
    }

    /// Evaluates against `vars` (variable name → value).
    pub(crate) fn eval(&self, vars: &Map<String, Value>) -> R<Value> {
        eval(&self.0, vars)
    }
}

fn field(v: &Value, name: &str) -> R<Value> {
    match v {
        Value::Object(m) => m
            .get(name)
            .cloned()
            .ok_or_else(|| ExprError(format!("no such key: {name}"))),
        _ => fail(format!("cannot select {name} from a non-object")),
    }
}

fn truth(v: &Value) -> R<bool> {
    v.as_bool()
        .ok_or_else(|| ExprError(format!("{v} is not a bool")))
}

fn order(a: &Value, b: &Value) -> R<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .zip(y.as_f64())
            .and_then(|(x, y)| x.partial_cmp(&y))
            .ok_or_else(|| ExprError("numbers cannot be compared".into())),
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        _ => fail(format!("{a} and {b} cannot be ordered")),
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => order(a, b).is_ok_and(|o| o.is_eq()),
        _ => a == b,
    }
}

fn arith(op: &str, a: &Value, b: &Value) -> R<Value> {
    match (a, b) {
        (Value::String(x), Value::String(y)) if op == "+" => Ok(Value::String(format!("{x}{y}"))),
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            let r = match op {
                "+" => x + y,
                "-" => x - y,
                "*" => x * y,
                "/" if y != 0.0 => x / y,
                "%" if y != 0.0 => x % y,
                _ => return fail("division by zero"),
            };
            Ok(number(r))
        }
        _ => fail(format!("{op} needs two numbers")),
    }
}

fn eval(ast: &Ast, vars: &Map<String, Value>) -> R<Value> {
    match ast {
        Ast::Lit(v) => Ok(v.clone()),
        Ast::Var(name) => vars
            .get(name)
            .cloned()
            .ok_or_else(|| ExprError(format!("undeclared reference to {name}"))),
        Ast::List(items) => Ok(Value::Array(
            items.iter().map(|i| eval(i, vars)).collect::<R<_>>()?,
        )),
        Ast::Field(of, name) => field(&eval(of, vars)?, name),
        Ast::Index(of, i) => match (eval(of, vars)?, eval(i, vars)?) {
            (Value::Object(m), Value::String(k)) => m
                .get(&k)
                .cloned()
                .ok_or_else(|| ExprError(format!("no such key: {k}"))),
            (Value::Array(a), Value::Number(n)) => n
                .as_u64()
                .and_then(|n| a.get(n as usize).cloned())
                .ok_or_else(|| ExprError("index out of range".into())),
            _ => fail("bad index"),
        },
        Ast::Unary("!", e) => Ok(Value::Bool(!truth(&eval(e, vars)?)?)),
        Ast::Unary(_, e) => arith("-", &Value::from(0), &eval(e, vars)?),
        Ast::Binary("&&", a, b) => {
            // CEL's commutative logic: false wins even over an error.
            let left = eval(a, vars).and_then(|v| truth(&v));
            if left == Ok(false) {
                return Ok(Value::Bool(false));
            }
            let right = truth(&eval(b, vars)?)?;
            Ok(Value::Bool(left? && right))
        }
        Ast::Binary("||", a, b) => {
            let left = eval(a, vars).and_then(|v| truth(&v));
            if left == Ok(true) {
                return Ok(Value::Bool(true));
            }
            let right = truth(&eval(b, vars)?)?;
            Ok(Value::Bool(left? || right))
        }
        Ast::Binary(op, a, b) => {
            let (x, y) = (eval(a, vars)?, eval(b, vars)?);
            Ok(match *op {
                "==" => Value::Bool(equal(&x, &y)),
                "!=" => Value::Bool(!equal(&x, &y)),
                "<" => Value::Bool(order(&x, &y)?.is_lt()),
                "<=" => Value::Bool(order(&x, &y)?.is_le()),
                ">" => Value::Bool(order(&x, &y)?.is_gt()),
                ">=" => Value::Bool(order(&x, &y)?.is_ge()),
                "in" => Value::Bool(match &y {
                    Value::Array(a) => a.iter().any(|v| equal(v, &x)),
                    Value::Object(m) => x.as_str().is_some_and(|k| m.contains_key(k)),
                    _ => return fail("`in` needs a list or a map"),
                }),
                _ => arith(op, &x, &y)?,
            })
        }
        Ast::Cond(c, a, b) => {
            if truth(&eval(c, vars)?)? {
                eval(a, vars)
            } else {
                eval(b, vars)
            }
        }
        Ast::Call(None, f, args) if f == "has" => match args.as_slice() {
            [Ast::Field(of, name)] => Ok(Value::Bool(
                matches!(eval(of, vars)?, Value::Object(m) if m.contains_key(name)),
            )),
            _ => fail("has() takes a field selection"),
        },
        Ast::Call(None, f, args) => {
            let args: Vec<Value> = args.iter().map(|a| eval(a, vars)).collect::<R<_>>()?;
            match (f.as_str(), args.as_slice()) {
                ("size", [Value::String(s)]) => Ok(Value::from(s.chars().count())),
                ("size", [Value::Array(a)]) => Ok(Value::from(a.len())),
                ("size", [Value::Object(m)]) => Ok(Value::from(m.len())),
                ("string", [v]) => Ok(Value::String(match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })),
                ("int", [Value::String(s)]) => s
                    .trim()
                    .parse::<i64>()
                    .map(Value::from)
                    .map_err(|_| ExprError(format!("int({s:?})"))),
                ("int", [Value::Number(n)]) => Ok(Value::from(n.as_f64().unwrap_or(0.0) as i64)),
                _ => fail(format!("unknown function {f}")),
            }
        }
        Ast::Call(Some(recv), m, args) => {
            let recv = eval(recv, vars)?;
            let args: Vec<Value> = args.iter().map(|a| eval(a, vars)).collect::<R<_>>()?;
            match (m.as_str(), &recv, args.as_slice()) {
                ("contains", Value::String(s), [Value::String(x)]) => {
                    Ok(Value::Bool(s.contains(x.as_str())))
                }
                ("startsWith", Value::String(s), [Value::String(x)]) => {
                    Ok(Value::Bool(s.starts_with(x.as_str())))
                }
                ("endsWith", Value::String(s), [Value::String(x)]) => {
                    Ok(Value::Bool(s.ends_with(x.as_str())))
                }
                ("size", v, []) => eval(
                    &Ast::Call(None, "size".into(), vec![Ast::Lit(v.clone())]),
                    vars,
                ),
                _ => fail(format!("unknown method {m}")),
            }
        }
    }
}

/// A task condition's expression: empty is `true`; a parse or evaluation error, or a non-bool
/// result, is `false` (invariant 1).
pub(crate) fn condition_holds(expression: &str, vars: &Map<String, Value>) -> bool {
    if expression.trim().is_empty() {
        return true;
    }
    matches_bool(expression, vars)
}

/// An event filter's expression: empty never matches (invariant 2), errors never match.
pub(crate) fn filter_matches(expression: &str, vars: &Map<String, Value>) -> bool {
    !expression.trim().is_empty() && matches_bool(expression, vars)
}

fn matches_bool(expression: &str, vars: &Map<String, Value>) -> bool {
    Expr::parse(expression)
        .and_then(|e| e.eval(vars))
        .is_ok_and(|v| v == Value::Bool(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars() -> Map<String, Value> {
        let Value::Object(m) = json!({
            "input": {"user": {"id": 7, "name": "ada", "tags": ["a", "b"]}, "amount": 12.5},
            "output": {"skipped": true, "n": 3},
            "payload": {"min": 10},
            "event_key": "order:created",
        }) else {
            unreachable!()
        };
        m
    }

    fn t(src: &str) -> bool {
        condition_holds(src, &vars())
    }

    #[test]
    fn comparisons_logic_and_field_access() {
        assert!(t("input.user.id == 7"));
        assert!(t("input.user.id == 7.0"));
        assert!(t("input['user'].name == 'ada' && output.n > 2"));
        assert!(t("input.amount >= payload.min || false"));
        assert!(t("!(output.n < 3)"));
        assert!(t(
            r#"event_key.startsWith("order:") && 'b' in input.user.tags"#
        ));
        assert!(t("has(output.skipped) && output.skipped"));
        assert!(!t("has(output.missing)"));
        assert!(t(
            "size(input.user.tags) == 2 && input.user.name.size() == 3"
        ));
        assert!(t("output.n * 2 + 1 == 7 && output.n % 2 == 1"));
        assert!(t("(output.n > 1 ? 'big' : 'small') == 'big'"));
        assert!(t("string(input.user.id) == '7' && int('42') == 42"));
    }

    #[test]
    fn errors_never_match_and_empty_means_what_the_caller_says() {
        assert!(!t("input.nope == 1"), "missing key");
        assert!(!t("input.user.id == "), "parse error");
        assert!(!t("input.user.id"), "not a bool");
        assert!(!t("'a' < 1"), "mixed kinds are unordered");
        let short = Expr::parse("false && input.nope == 1").and_then(|e| e.eval(&vars()));
        assert_eq!(short, Ok(json!(false)), "false wins over an error");
        assert!(t("true || input.nope == 1"), "true wins over an error");
        assert!(condition_holds("", &vars()));
        assert!(!filter_matches("", &vars()));
        assert!(filter_matches("payload.min == 10", &vars()));
    }

    #[test]
    fn a_deep_expression_is_a_clear_error_and_no_stack_overflow() {
        let n = 100_000;
        for src in [
            format!("{}1{}", "(".repeat(n), ")".repeat(n)),
            format!("{}true", "!".repeat(n)),
            vec!["1"; n].join(" + "),
            format!("input{}", ".a".repeat(n)),
            format!("{}1{}", "[".repeat(n), "]".repeat(n)),
            format!("{}0", "true ? 1 : ".repeat(n)),
        ] {
            let err = Expr::parse(&src).expect_err("too deep");
            assert!(err.0.contains("deeper than 100 levels"), "{}", err.0);
            assert!(!condition_holds(&src, &vars()));
        }
        let fine = format!("{}1{} == 1", "(".repeat(40), ")".repeat(40));
        assert!(t(&fine), "40 levels are fine");
        assert!(
            t(&(vec!["1"; 60].join(" + ") + " == 60")),
            "a chain of 60 is fine"
        );
    }

    #[test]
    fn lexer_and_parser_refuse_garbage_without_panicking() {
        for src in [
            "'unterminated",
            "a..b",
            "(((",
            "a ? b",
            "#",
            "1 +",
            "f(,)",
            "[1,",
            "a[",
            "x.()",
        ] {
            assert!(Expr::parse(src).is_err(), "{src} parses");
            assert!(!condition_holds(src, &vars()), "{src} holds");
        }
    }
}
