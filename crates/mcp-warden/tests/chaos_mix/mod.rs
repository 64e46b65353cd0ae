//! What the chaos test sends and what it accepts: the kinds of call, how often
//! each is drawn from a seeded generator, and the answers each kind allows.

use serde_json::{json, Value};

pub const INTERNAL: &str = "Error: An internal error occurred while executing the tool.";
/// The upstreams' timeout: short, so hangs and freezes end quickly.
pub const TIMEOUT_MS: u64 = 400;
/// Notifications per `flood` call.
pub const FLOOD: u64 = 200;

/// What a call asks of its upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Echo,
    Quick,
    Progress,
    Fail,
    RpcError,
    Garbage,
    Twice,
    Flood,
    Malformed,
    Hang,
    Slow,
    Crash,
    Freeze,
    UnknownTool,
    InvalidArgs,
}

/// How often each kind is drawn, per thousand. Crashes and freezes are rare on
/// purpose: calls to an upstream that is down fail at once, so each one takes a
/// share of the calls after it off the upstream paths the rest exercise.
pub const MIX: [(Kind, u64); 15] = [
    (Kind::Echo, 388),
    (Kind::Quick, 60),
    (Kind::Progress, 40),
    (Kind::Fail, 30),
    (Kind::RpcError, 30),
    (Kind::Garbage, 60),
    (Kind::Twice, 80),
    (Kind::Flood, 40),
    (Kind::Malformed, 60),
    (Kind::Hang, 50),
    (Kind::Slow, 30),
    (Kind::Crash, 5),
    (Kind::Freeze, 2),
    (Kind::UnknownTool, 60),
    (Kind::InvalidArgs, 65),
];

/// The answers a call may get. Every call that reaches an upstream may also get
/// the generic internal error: a crash, a freeze or a restart of its upstream
/// (caused by another call) can end it; which calls that hits is timing, so it
/// is counted, never required or ruled out.
#[derive(Debug, Clone)]
pub enum Expect {
    /// A result with this text.
    Text(String),
    /// A tool error with this text.
    ToolError(String),
    /// A JSON-RPC error with this code, the upstream's own.
    RpcError(i64),
    /// Only the internal error: the upstream fails this call whatever happens.
    Internal,
    /// The gateway refuses it before any upstream sees it: never the internal error.
    Refused,
}

/// An answer, as the client reads it.
#[derive(Debug)]
pub enum Got {
    Text(String),
    ToolError(String),
    Internal,
    RpcError(i64),
    Other,
}

impl Got {
    pub fn of(response: &Value) -> Got {
        if let Some(code) = response.pointer("/error/code").and_then(Value::as_i64) {
            return Got::RpcError(code);
        }
        let Some(result) = response.get("result") else {
            return Got::Other;
        };
        let text = result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match (result.get("isError") == Some(&json!(true)), text.as_str()) {
            (true, INTERNAL) => Got::Internal,
            (true, _) => Got::ToolError(text),
            (false, _) => Got::Text(text),
        }
    }

    pub fn class(&self) -> &'static str {
        match self {
            Got::Text(_) => "ok",
            Got::ToolError(_) => "tool_error",
            Got::Internal => "internal",
            Got::RpcError(_) => "rpc_error",
            Got::Other => "other",
        }
    }

    pub fn allowed_by(&self, expect: &Expect) -> bool {
        match (expect, self) {
            (Expect::Refused, Got::RpcError(_)) => true,
            (Expect::Refused, Got::ToolError(t)) => t.starts_with("Error:"),
            (Expect::Refused, _) => false,
            (_, Got::Internal) => true,
            (Expect::Text(want), Got::Text(t)) => t == want,
            (Expect::ToolError(want), Got::ToolError(t)) => t == want,
            (Expect::RpcError(want), Got::RpcError(c)) => c == want,
            _ => false,
        }
    }
}

/// SplitMix64: small, seedable, good enough to draw a mix from.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn kind(&mut self) -> Kind {
        let total: u64 = MIX.iter().map(|(_, w)| w).sum();
        let mut pick = self.below(total);
        for (kind, weight) in MIX {
            if pick < weight {
                return kind;
            }
            pick -= weight;
        }
        unreachable!("the weights sum to the total")
    }
}

/// The `tools/call` params for call number `seq` of `kind` on upstream `up`, and
/// what it may be answered.
pub fn draw(kind: Kind, up: &str, seq: u64, rng: &mut Rng) -> (Value, Expect) {
    let call = |tool: &str, args: Value| json!({"name": format!("{up}.{tool}"), "arguments": args});
    match kind {
        Kind::Echo => {
            // Unique per call: an answer handed to the wrong request shows.
            let args = json!({"text": format!("call {seq}"), "n": seq});
            let want = serde_json::to_string(&args).unwrap();
            (call("echo", args), Expect::Text(want))
        }
        Kind::Quick => {
            let ms = rng.below(30);
            (
                call("slow", json!({"ms": ms})),
                Expect::Text(format!("slept {ms} ms")),
            )
        }
        Kind::Progress => {
            let mut params = call("progress", json!({"steps": 5}));
            params["_meta"] = json!({"progressToken": format!("tok-{seq}")});
            (params, Expect::Text("5 steps done".into()))
        }
        Kind::Fail => (call("fail", json!({})), Expect::ToolError("boom".into())),
        Kind::RpcError => (call("rpc_error", json!({})), Expect::RpcError(-32000)),
        Kind::Garbage => (
            call("garbage", json!({})),
            Expect::Text("after garbage".into()),
        ),
        Kind::Twice => (
            call("twice", json!({})),
            Expect::Text("first answer".into()),
        ),
        Kind::Flood => (
            call("flood", json!({"n": FLOOD})),
            Expect::Text(format!("flooded {FLOOD}")),
        ),
        Kind::Malformed => {
            let results = [
                json!(null),
                json!("a string"),
                json!([1, 2]),
                json!(7),
                json!(true),
            ];
            let result = results[rng.below(results.len() as u64) as usize].clone();
            (
                call("malformed", json!({"result": result})),
                Expect::Internal,
            )
        }
        Kind::Hang => {
            // Past the timeout; the upstream answers anyway, late.
            let ms = TIMEOUT_MS + 200 + rng.below(300);
            (call("hang", json!({"ms": ms})), Expect::Internal)
        }
        Kind::Slow => (call("slow", json!({"ms": 5000})), Expect::Internal),
        Kind::Crash => (call("crash", json!({})), Expect::Internal),
        Kind::Freeze => (call("freeze", json!({})), Expect::Internal),
        Kind::UnknownTool => (
            call(&format!("no_such_tool_{}", seq % 7), json!({})),
            Expect::Refused,
        ),
        Kind::InvalidArgs => {
            let (tool, args) = match rng.below(3) {
                0 => ("echo", json!({"n": "not a number"})),
                1 => ("slow", json!({"ms": -1})),
                _ => ("slow", json!({})),
            };
            (call(tool, args), Expect::Refused)
        }
    }
}

/// One call the client sent.
pub struct Call {
    pub kind: Kind,
    pub expect: Expect,
    pub answers: u32,
    /// The class of its first answer.
    pub got: Option<&'static str>,
}
