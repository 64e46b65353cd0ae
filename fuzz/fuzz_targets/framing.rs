//! Bytes → the line reader, in reads of a size the input picks, checked against an
//! exact oracle: every line comes back (without its `\n` and one trailing `\r`), or
//! is reported too long with its length. The oracle is the one of tests/fuzz.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use warden_gateway::jsonrpc::{self, Line};

/// Hands out `step` bytes per read; always ready.
struct Chunked<'a> {
    data: &'a [u8],
    at: usize,
    step: usize,
}

impl tokio::io::AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self
            .step
            .min(self.data.len() - self.at)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

/// The reader never returns Pending, so polling until ready needs no runtime.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fuzz_target!(|input: &[u8]| {
    // The first three bytes pick the bound, the read size and the buffer size.
    let (head, data) = input.split_at(input.len().min(3));
    let byte = |i: usize| head.get(i).copied().unwrap_or(0) as usize;
    let max = 1 + byte(0) * 2;
    let step = 1 + byte(1) % 64;
    let capacity = 1 + byte(2) % 128;

    let mut segments: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    if segments.last().is_some_and(|s| s.is_empty()) {
        segments.pop();
    }
    // Only a line ended by `\n` loses a trailing `\r`: the last line, cut short by
    // the end of input, keeps it (found by this target; harmless, JSON reads `\r` as
    // whitespace).
    let unterminated = !data.is_empty() && !data.ends_with(b"\n");
    let count = segments.len();
    let expected: Vec<String> = segments
        .into_iter()
        .enumerate()
        .map(|(i, s)| match s.len() > max {
            true => format!("too long: {}", s.len()),
            false => {
                let last = unterminated && i + 1 == count;
                let s = match last {
                    true => s,
                    false => s.strip_suffix(b"\r").unwrap_or(s),
                };
                format!("line: {}", String::from_utf8_lossy(s))
            }
        })
        .collect();

    let got = block_on(async {
        let chunked = Chunked { data, at: 0, step };
        let mut reader = tokio::io::BufReader::with_capacity(capacity, chunked);
        let mut out = Vec::new();
        while let Some(line) = jsonrpc::read_line(&mut reader, max).await.unwrap() {
            out.push(match line {
                Line::Message(m) => format!("line: {}", String::from_utf8_lossy(&m)),
                Line::TooLong(n) => format!("too long: {n}"),
            });
        }
        out
    });
    assert_eq!(got, expected, "max {max}, step {step}, capacity {capacity}");

    // Whatever a line holds, telling what it is never panics.
    for line in &got {
        if let Ok(v) = serde_json::from_str::<Value>(line.trim_start_matches("line: ")) {
            let _ = jsonrpc::classify(&v);
            let _ = jsonrpc::usable_id(&v);
        }
    }
});
