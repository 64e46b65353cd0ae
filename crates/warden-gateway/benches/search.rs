//! What a virtual server costs (V2, V4), in process, over a catalogue of
//! 1,000 tools of which a rule hides one in ten from the caller.
//!
//! `cargo bench -p warden-gateway --bench search` prints the median time of
//! each, and its ratio to the baseline measured in the same run: the listing of
//! the whole catalogue (`tools/list` on `/mcp`, serialised as a client gets it).
//! - a virtual server in list mode over every tool, with renames and
//!   descriptions (`tools/list` on `/mcp/<name>`);
//! - `search_tools` over the same tools, index warm (the usual query: the
//!   index is counted once per catalogue), the caller's listing included;
//! - the same query counting the index again (what every query cost before the
//!   index was kept).

#[allow(dead_code)]
#[path = "../src/gateway/servers/labelled.rs"]
mod labelled;

use serde_json::{json, Value};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{Caller, Catalogue, Pipeline, ToolPolicy};
use warden_gateway::config::servers::VirtualServer;
use warden_gateway::config::Config;
use warden_gateway::gateway::servers::{self, Against, Route, Views};

const TOOLS: usize = 1000;

/// 1,000 tools: the labelled catalogue over and over, numbered.
fn tools() -> Vec<Value> {
    let base = labelled::catalogue();
    (0..TOOLS)
        .map(|i| {
            let mut t = base[i % base.len()].clone();
            t["name"] = json!(format!("{}_{i}", t["name"].as_str().unwrap()));
            t
        })
        .collect()
}

/// A config with a list server and a search server over every tool, and a
/// rule hiding the tools whose number ends in 7.
fn config() -> Config {
    let mut text = String::from(
        "[[upstream]]\nname = \"x\"\ncommand = [\"x\"]\n\
         [[rule]]\ncallers = [\"*\"]\ntools = [\"*7\"]\neffect = \"deny\"\n\
         [[rule]]\ncallers = [\"*\"]\ntools = [\"*\"]\neffect = \"allow\"\n\
         [[server]]\nname = \"find\"\ntools = [\"*\"]\ndiscovery = \"search\"\n\
         [[server]]\nname = \"all\"\ntools = [\"*\"]\n",
    );
    let rename: Vec<String> = (0..50)
        .map(|i| format!("\"web.fetch_{}\" = \"get_page_{i}\"", 19 + 37 * i))
        .collect();
    let describe: Vec<String> = (0..50)
        .map(|i| format!("\"fs.read_file_{}\" = \"Read one file.\"", 37 * i))
        .collect();
    text += &format!(
        "rename = {{ {} }}\ndescribe = {{ {} }}\n",
        rename.join(", "),
        describe.join(", ")
    );
    Config::parse(&text, "bench.toml").expect("the bench config")
}

/// The median time of one run of `f`, over batches of `per` runs.
/// The medians of `a` and `b`, timed in alternation, so that what the machine
/// does meanwhile weighs on both alike.
fn medians(per: u32, mut a: impl FnMut(), mut b: impl FnMut()) -> (Duration, Duration) {
    let time = |f: &mut dyn FnMut()| {
        let started = Instant::now();
        for _ in 0..per {
            f();
        }
        started.elapsed() / per
    };
    time(&mut a);
    time(&mut b);
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..31 {
        ta.push(time(&mut a));
        tb.push(time(&mut b));
    }
    ta.sort();
    tb.sort();
    (ta[ta.len() / 2], tb[tb.len() / 2])
}

fn median(per: u32, mut f: impl FnMut()) -> Duration {
    for _ in 0..per {
        f();
    }
    let mut times: Vec<Duration> = (0..31)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..per {
                f();
            }
            started.elapsed() / per
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

struct Setup {
    catalogue: Arc<Catalogue>,
    pipeline: Pipeline,
    caller: Caller,
    list: Arc<VirtualServer>,
    find: Arc<VirtualServer>,
}

fn search(s: &Setup, views: &Views, query: &str) -> String {
    let listed = s.pipeline.list(&s.catalogue, Some(&s.caller));
    let mut params = json!({"name": "search_tools", "arguments": {"query": query, "limit": 5}});
    let view = || views.get(&s.find, &s.catalogue);
    let found = Default::default();
    let on = Against {
        listed: &listed,
        view: &view,
        found: &found,
    };
    match servers::route(&s.find, &mut params, &on) {
        Route::Found(v, _) => v.to_string(),
        _ => unreachable!("search_tools answers itself"),
    }
}

fn main() {
    let config = config();
    let (catalogue, problems) = Catalogue::from_tools(&tools(), &ToolPolicy::default());
    assert!(problems.is_empty(), "{problems:?}");
    let rules = Arc::new(config.rules());
    let s = Setup {
        catalogue: Arc::new(catalogue),
        pipeline: Pipeline::new().with_grant(rules.clone(), rules),
        caller: Caller::new("bench"),
        list: config.server("all").unwrap().clone(),
        find: config.server("find").unwrap().clone(),
    };
    let visible = s.pipeline.list(&s.catalogue, Some(&s.caller)).len();
    let views = Views::default();
    let (whole, on_server) = medians(
        20,
        || {
            let listed = s.pipeline.list(&s.catalogue, Some(&s.caller));
            let tools: Vec<_> = listed.iter().map(|t| t.published()).collect();
            let tools = serde_json::to_string(&tools).unwrap();
            black_box(format!(r#"{{"tools":{tools}}}"#));
        },
        || {
            let listed = s.pipeline.list(&s.catalogue, Some(&s.caller));
            let view = views.get(&s.list, &s.catalogue);
            let tools = servers::listing(&s.list, &listed, &view, &Default::default());
            black_box(json!({"tools": tools}).to_string());
        },
    );
    let granted = median(20, || {
        black_box(s.pipeline.list(&s.catalogue, Some(&s.caller)));
    });
    let queries = labelled::LABELLED;
    let warm = Views::default();
    let mut q = 0;
    let searched = median(50, || {
        q += 1;
        black_box(search(&s, &warm, queries[q % queries.len()].0));
    });
    let recounted = median(5, || {
        q += 1;
        black_box(search(&s, &Views::default(), queries[q % queries.len()].0));
    });
    println!("{TOOLS} tools, {visible} visible to the caller; median per operation:");
    let row = |what: &str, t: Duration| {
        let ratio = t.as_secs_f64() / whole.as_secs_f64();
        println!(
            "  {what:<52} {:>9.1} µs  {ratio:>6.2}x",
            t.as_secs_f64() * 1e6
        );
    };
    row("tools/list, whole catalogue (baseline)", whole);
    row("tools/list, virtual server over every tool", on_server);
    row(
        "the caller's listing alone (grant over every tool)",
        granted,
    );
    row("search_tools, view kept (per query)", searched);
    row("search_tools, view made again for each query", recounted);
}
