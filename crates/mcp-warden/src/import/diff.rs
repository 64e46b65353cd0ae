//! A unified diff of two texts, line by line, for `wrap` to show what it
//! changed in a client's file. Client configs are small: a longest common
//! subsequence over the lines is plenty.

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// Past this many line pairs, the whole old text is shown removed and the new added.
const MAX_CELLS: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Del,
    Add,
}

/// `--- old_name` / `+++ new_name` and `@@ -a,b +c,d @@` hunks; empty when
/// the texts are equal.
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let ops = script(&a, &b);
    if ops.iter().all(|(op, ..)| *op == Op::Same) {
        return String::new();
    }
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    let mut i = 0;
    while i < ops.len() {
        let Some(first) = (i..ops.len()).find(|&k| ops[k].0 != Op::Same) else {
            break;
        };
        let start = first.saturating_sub(CONTEXT);
        // The hunk runs on while changes are closer than twice the context.
        let mut end = first;
        let mut k = first;
        while k < ops.len() {
            if ops[k].0 != Op::Same {
                end = k;
            } else if k - end > 2 * CONTEXT {
                break;
            }
            k += 1;
        }
        let stop = (end + CONTEXT + 1).min(ops.len());
        hunk(&mut out, &ops[start..stop], &a, &b);
        i = stop;
    }
    out
}

fn hunk(out: &mut String, ops: &[(Op, usize, usize)], a: &[&str], b: &[&str]) {
    let (old_start, new_start) = (ops[0].1, ops[0].2);
    let old_len = ops.iter().filter(|o| o.0 != Op::Add).count();
    let new_len = ops.iter().filter(|o| o.0 != Op::Del).count();
    out.push_str(&format!(
        "@@ -{},{old_len} +{},{new_len} @@\n",
        old_start + 1,
        new_start + 1
    ));
    for (op, i, j) in ops {
        let line = match op {
            Op::Same => format!(" {}\n", a[*i]),
            Op::Del => format!("-{}\n", a[*i]),
            Op::Add => format!("+{}\n", b[*j]),
        };
        out.push_str(&line);
    }
}

/// The edit script: each op with the index it stands at in `a` and in `b`.
fn script(a: &[&str], b: &[&str]) -> Vec<(Op, usize, usize)> {
    if (a.len() + 1) * (b.len() + 1) > MAX_CELLS {
        let dels = (0..a.len()).map(|i| (Op::Del, i, 0));
        return dels
            .chain((0..b.len()).map(|j| (Op::Add, a.len(), j)))
            .collect();
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let w = b.len() + 1;
    let mut lcs = vec![0u32; (a.len() + 1) * w];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i * w + j] = if a[i] == b[j] {
                lcs[(i + 1) * w + j + 1] + 1
            } else {
                lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j, mut ops) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((Op::Same, i, j));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
            ops.push((Op::Del, i, j));
            i += 1;
        } else {
            ops.push((Op::Add, i, j));
            j += 1;
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_come_in_hunks_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = "a\nB\nc\nd\ne\nf\ng\nh\ni\nj\nk\n";
        assert_eq!(
            unified(old, new, "x.bak", "x"),
            "--- x.bak\n+++ x\n@@ -1,5 +1,5 @@\n a\n-b\n+B\n c\n d\n e\n@@ -8,3 +8,4 @@\n h\n i\n j\n+k\n"
        );
        assert_eq!(unified(old, old, "x.bak", "x"), "");
    }
}
