//! The protobuf wire format of the few OpenTelemetry messages the gateway
//! sends (opentelemetry-proto's `common/v1`, `resource/v1`, `trace/v1`,
//! `logs/v1`), written by hand: for them it is a few tags, varints and length
//! prefixes, and a code generator would cost the default build more than it
//! saves.

use super::span::Attr;

/// Protobuf wire types.
pub const VARINT: u32 = 0;
pub const FIXED64: u32 = 1;
pub const LEN: u32 = 2;

pub fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn bytes_field(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A nested message: written into a scratch buffer, then length-prefixed.
pub fn message(out: &mut Vec<u8>, field: u32, write: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    write(&mut inner);
    bytes_field(out, field, &inner);
}

/// `AnyValue`: string_value = 1, bool_value = 2, int_value = 3, array_value = 5.
pub fn any_value(out: &mut Vec<u8>, value: &Attr) {
    match value {
        Attr::Str(s) => bytes_field(out, 1, s.as_bytes()),
        Attr::Bool(b) => {
            tag(out, 2, VARINT);
            varint(out, u64::from(*b));
        }
        Attr::Int(n) => {
            tag(out, 3, VARINT);
            varint(out, *n as u64);
        }
        // ArrayValue { repeated AnyValue values = 1 }
        Attr::Strs(items) => message(out, 5, |a| {
            for s in items {
                message(a, 1, |v| bytes_field(v, 1, s.as_bytes()));
            }
        }),
    }
}

/// `KeyValue { string key = 1; AnyValue value = 2 }` as field `field` of its parent.
pub fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &Attr) {
    message(out, field, |kv| {
        bytes_field(kv, 1, key.as_bytes());
        message(kv, 2, |v| any_value(v, value));
    });
}

/// `Resource { repeated KeyValue attributes = 1 }`: this gateway.
pub fn resource(out: &mut Vec<u8>, service_name: &str) {
    key_value(out, 1, "service.name", &Attr::from(service_name));
    key_value(
        out,
        1,
        "service.version",
        &Attr::from(env!("CARGO_PKG_VERSION")),
    );
}

/// `InstrumentationScope { string name = 1; string version = 2 }`.
pub fn scope(out: &mut Vec<u8>) {
    bytes_field(out, 1, b"mcp-warden");
    bytes_field(out, 2, env!("CARGO_PKG_VERSION").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_groups_of_seven() {
        let mut out = Vec::new();
        varint(&mut out, 1);
        varint(&mut out, 300);
        varint(&mut out, u64::MAX);
        assert_eq!(&out[..3], &[0x01, 0xac, 0x02]);
        assert_eq!(out.len(), 3 + 10);
    }
}
