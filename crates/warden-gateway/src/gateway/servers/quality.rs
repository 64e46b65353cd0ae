//! How well `search_tools` ranks (V4), measured on the labelled set
//! (`labelled.rs`): `cargo test -p warden-gateway quality -- --nocapture`
//! prints recall@5 and MRR. Its cost is measured by the bench
//! (`cargo bench -p warden-gateway --bench search`).

use super::labelled::{catalogue, LABELLED};
use super::search::rank;

#[test]
fn quality_recall_at_5_and_mrr_on_task_queries() {
    let tools = catalogue();
    let (mut hits, mut rr, mut misses) = (0usize, 0.0f64, Vec::new());
    for (query, want) in LABELLED {
        let found: Vec<&str> = rank(&tools, query, 5)
            .into_iter()
            .map(|i| tools[i]["name"].as_str().unwrap())
            .collect();
        match found.iter().position(|n| n == want) {
            Some(p) => {
                hits += 1;
                rr += 1.0 / (p + 1) as f64;
            }
            None => misses.push(format!("{query:?} → {found:?}, wanted {want}")),
        }
    }
    let n = LABELLED.len() as f64;
    let (recall, mrr) = (hits as f64 / n, rr / n);
    println!(
        "search quality: {} queries over {} tools: recall@5 = {recall:.3}, MRR = {mrr:.3}",
        LABELLED.len(),
        tools.len()
    );
    for m in &misses {
        println!("  missed: {m}");
    }
    assert!(LABELLED.len() >= 50);
    assert!(recall >= 0.9, "recall@5 {recall:.3} is under 0.9");
}
