//! The table's rows: each step's figures, each geocount figure beside its peer from the same
//! run, with the targets.

use crate::figure::{Figure, Goal, Row, Unit};
use crate::memory::MemoryRun;
use crate::steps::{
    self, BATCH_CONNECTIONS, BATCH_SIZE, COUNTERS, MEMORY_CURVE_FROM, ZIPF_EXPONENT,
};
use crate::{Results, bounds, durability, keys, memory, reclaim, replicas, resp, scan};

/// Every row of `results`, step by step.
pub(crate) fn rows(results: &Results) -> Vec<Row> {
    let mut rows = Vec::new();
    let redis = results.redis.as_ref();
    let redis_best = redis.map(|r| r.off[2].clone());
    let redis_always_p1 = redis.map(|r| r.always[0].clone());
    if let Some(redis) = redis {
        for (figures, persistence) in [
            (&redis.off, "persistence off"),
            (&redis.always, "appendfsync always"),
        ] {
            for (figure, pipeline) in figures.iter().zip(steps::PIPELINES) {
                rows.push(Row::alone(
                    format!("Redis INCR -c 50 -P {pipeline}, {persistence}"),
                    figure.clone(),
                    None,
                ));
            }
        }
    }
    let ceiling = results.ceiling.as_ref();
    if let Some(ceiling) = ceiling {
        rows.push(Row::alone(
            "hyper ceiling, wrk write script (PATCH)",
            ceiling.write.rate.clone(),
            None,
        ));
        rows.push(Row::alone(
            "hyper ceiling, wrk read script (GET)",
            ceiling.read.rate.clone(),
            None,
        ));
        rows.push(Row::alone(
            "durable hyper ceiling (each request fsynced in groups before its answer), wrk write script",
            ceiling.durable_write.rate.clone(),
            None,
        ));
    }
    if let Some(node) = &results.node {
        let batches = format!(
            "shard node, durable: POST /batch of {BATCH_SIZE}, Zipf {ZIPF_EXPONENT} over {COUNTERS} counters, {BATCH_CONNECTIONS} connections, Prefer: return=minimal"
        );
        rows.push(Row::against(
            &batches,
            node.batches.rate.clone(),
            "Redis -P 128, persistence off, a sample just before each",
            node.redis_alongside.clone(),
            Some(Goal::RatioAtLeast(3.0)),
        ));
        if let Some(best) = &redis_best {
            rows.push(Row::against(
                "the same",
                node.batches.rate.clone(),
                "Redis -P 128, persistence off (step 1)",
                best.clone(),
                None,
            ));
        }
        rows.push(Row::alone(
            "the same, aim",
            node.batches.rate.clone(),
            Some(Goal::AtLeast(5e6)),
        ));
        rows.push(Row::alone(
            "the same, p99 latency of a batch",
            node.batches.p99.clone(),
            None,
        ));
        rows.push(Row::against(
            "the same with every outcome answered (no Prefer)",
            node.batches_full_answers.rate.clone(),
            "Redis -P 128, persistence off, beside the batches above",
            node.redis_alongside.clone(),
            None,
        ));
        for uniform in &node.uniform {
            rows.push(Row::against(
                format!(
                    "shard node, durable: POST /batch of {BATCH_SIZE}, uniform over {} counters, {BATCH_CONNECTIONS} connections, Prefer: return=minimal",
                    uniform.counters
                ),
                uniform.batches.rate.clone(),
                format!(
                    "Redis -P 128 -r {}, persistence off, in the same rounds",
                    uniform.counters
                ),
                uniform.redis_alongside.clone(),
                None,
            ));
        }
        let single = "shard node, durable: PATCH /counter/{id}/write, wrk -t2 -c64";
        if let Some(ceiling) = ceiling {
            rows.push(Row::against(
                single,
                node.http_writes.rate.clone(),
                "hyper ceiling, same script",
                ceiling.write.rate.clone(),
                Some(Goal::RatioAtLeast(0.8)),
            ));
            // Whether any durable HTTP server could meet that target here: the bare server
            // that only fsyncs each request before answering, against the plain one.
            rows.push(Row::against(
                "the bound on that: the durable hyper ceiling, wrk write script",
                ceiling.durable_write.rate.clone(),
                "hyper ceiling, same script",
                ceiling.write.rate.clone(),
                Some(Goal::RatioAtLeast(0.8)),
            ));
            rows.push(Row::against(
                single,
                node.http_writes.rate.clone(),
                "durable hyper ceiling, same script",
                ceiling.durable_write.rate.clone(),
                None,
            ));
        }
        if let Some(always) = &redis_always_p1 {
            rows.push(Row::against(
                single,
                node.http_writes.rate.clone(),
                "Redis -P 1, appendfsync always",
                always.clone(),
                Some(Goal::RatioAtLeast(3.0)),
            ));
            // Whether any HTTP server could meet that target here: the bare hyper server
            // (no storage at all) against the same Redis figure.
            if let Some(ceiling) = ceiling {
                rows.push(Row::against(
                    "the bound on that: the hyper ceiling itself, wrk write script",
                    ceiling.write.rate.clone(),
                    "Redis -P 1, appendfsync always",
                    always.clone(),
                    Some(Goal::RatioAtLeast(3.0)),
                ));
            }
        }
        if ceiling.is_none() && redis_always_p1.is_none() {
            rows.push(Row::alone(single, node.http_writes.rate.clone(), None));
        }
        rows.push(Row::alone(
            "the same, p99 latency",
            node.http_writes.p99.clone(),
            None,
        ));
        if let Some(pair) = &results.node_with_peer {
            durability::pair_rows(&mut rows, pair);
        }
    }
    if let Some(figures) = &results.resp {
        resp::rows(&mut rows, figures);
    }
    if let Some(curve) = &results.curve
        && let Some(first) = curve.first()
    {
        for point in curve {
            rows.push(Row::against(
                format!(
                    "growth: batches, uniform over {} counters held",
                    point.counters
                ),
                point.batches.rate.clone(),
                format!("the same over {} counters", first.counters),
                first.batches.rate.clone(),
                Some(Goal::RatioAtLeast(0.8)),
            ));
        }
        for point in curve.iter().filter(|p| p.counters >= MEMORY_CURVE_FROM) {
            rows.push(Row::alone(
                format!(
                    "memory: shard node alone, resident bytes per counter, {} counters",
                    point.counters
                ),
                point.resident_bytes_per_counter.clone(),
                Some(Goal::Below(100.0 + 8.0)),
            ));
        }
    }
    if let Some(cluster) = &results.cluster {
        let reads =
            "global aggregator (1 replica per tier): GET /counter/{id}, wrk -t2 -c64, no writes";
        match ceiling {
            Some(ceiling) => {
                rows.push(Row::against(
                    reads,
                    cluster.reads_idle.rate.clone(),
                    "hyper ceiling, same script",
                    ceiling.read.rate.clone(),
                    Some(Goal::RatioAtLeast(0.8)),
                ));
                rows.push(Row::against(
                    "the same, p99 latency",
                    cluster.reads_idle.p99.clone(),
                    "hyper ceiling p99",
                    ceiling.read.p99.clone(),
                    Some(Goal::Below(5.0)),
                ));
            }
            None => rows.push(Row::alone(reads, cluster.reads_idle.rate.clone(), None)),
        }
        let loaded = "cluster (1 replica per tier): geoctl load --path batch --route owner flat out over every shard node while wrk reads the global aggregator (writes/s)";
        match &redis_best {
            Some(best) => rows.push(Row::against(
                loaded,
                cluster.writes.clone(),
                "Redis -P 128, persistence off",
                best.clone(),
                None,
            )),
            None => rows.push(Row::alone(loaded, cluster.writes.clone(), None)),
        }
        rows.push(Row::against(
            "the same, global reads meanwhile (wrk -t2 -c64)",
            cluster.reads_loaded.rate.clone(),
            "hyper ceiling reads under the same writes",
            cluster.ceiling_reads_loaded.rate.clone(),
            None,
        ));
        rows.push(Row::against(
            "the same, global read p99 meanwhile",
            cluster.reads_loaded.p99.clone(),
            "hyper ceiling read p99 under the same writes",
            cluster.ceiling_reads_loaded.p99.clone(),
            Some(Goal::Below(5.0)),
        ));
        rows.push(Row::against(
            "the same, global read p99 against the hyper ceiling's under the same writes",
            cluster.reads_loaded.p99.clone(),
            "hyper ceiling read p99 under the same writes",
            cluster.ceiling_reads_loaded.p99.clone(),
            Some(Goal::RatioAtMost(1.5)),
        ));
        // Whether any server's reads could meet 5 ms while these writes run on the same cores:
        // the bare hyper server, read by the same wrk under the same load, in turns.
        rows.push(Row::alone(
            "the bound on that: the hyper ceiling read p99 under the same writes (wrk -t2 -c64, in turns with the global reads)",
            cluster.ceiling_reads_loaded.p99.clone(),
            Some(Goal::Below(5.0)),
        ));
        rows.push(Row::alone(
            "the same, visibility lag p50 (ack → global value)",
            cluster.lag_p50.clone(),
            None,
        ));
        rows.push(Row::alone(
            "the same, visibility lag p99",
            cluster.lag_p99.clone(),
            Some(Goal::Below(400.0)),
        ));
        if let Some(replicas) = &cluster.replicas {
            replicas::rows(&mut rows, replicas);
        }
        if let Some(modes) = &cluster.durability {
            durability::cluster_rows(&mut rows, modes);
        }
    }
    if let Some(scan) = &results.scan {
        rows.push(Row::against(
            format!(
                "scan: global read p99 (wrk -t2 -c64) while {} loops ask {} over {} counters",
                scan::SCAN_LOOPS,
                scan::WORST_SCAN,
                scan.counters
            ),
            scan.reads_scanning.p99.clone(),
            "the same reads, idle",
            scan.reads_idle.p99.clone(),
            Some(Goal::RatioAtMost(10.0)),
        ));
        rows.push(Row::alone(
            "the same, reads refused (non-2xx: 503 stale) over the runs",
            Figure::new(Unit::Count, vec![scan.reads_scanning.errors as f64]),
            Some(Goal::Below(1.0)),
        ));
        rows.push(Row::alone(
            "the same, rankings answered (the rest refused with 429 past http.max_concurrent_scans)",
            Figure::new(Unit::Count, vec![scan.scans_answered as f64]),
            None,
        ));
    }
    if let Some(restore) = &results.restore {
        rows.push(Row::alone(
            format!(
                "restore of a lost slot of {} counters from its datacenter (its aggregator and the global one), until /healthz 200",
                restore.counters
            ),
            Figure::new(Unit::Ms, vec![restore.restore_secs * 1000.0]),
            None,
        ));
        rows.push(Row::alone(
            "the same, counters restored per second",
            Figure::new(
                Unit::PerSec,
                vec![restore.counters_restored as f64 / restore.restore_secs],
            ),
            None,
        ));
    }
    if let Some(memory) = &results.memory {
        let limit = 100.0 + memory.mean_id_bytes;
        // Every process of its kind in every run: the range shows both nodes and runs.
        let of = |entries: fn(&MemoryRun) -> &[(String, usize, f64)]| {
            let samples = memory.runs.iter().flat_map(entries).map(|e| e.2);
            Figure::new(Unit::Bytes, samples.collect())
        };
        rows.push(Row::alone(
            format!(
                "memory: cluster shard nodes (own slot + peers' replicas), bytes per (counter, slot), {} counters, over the nodes and runs",
                memory.counters
            ),
            of(|run| &run.shards),
            Some(Goal::Below(limit)),
        ));
        rows.push(Row::alone(
            "memory: datacenter aggregators, bytes per (counter, slot), over the aggregators and runs",
            of(|run| &run.datacenter_aggregators),
            Some(Goal::Below(limit)),
        ));
        let single = Figure::new(
            Unit::Bytes,
            (memory.runs.iter().flat_map(|run| &run.global))
                .map(|g| g.bytes_per_entry)
                .collect(),
        );
        rows.push(Row::alone(
            "memory: global aggregator per (counter, datacenter) held, P=1 (one process, holds 100%), over the runs",
            single.clone(),
            Some(Goal::Below(limit)),
        ));
        for split in &memory.partitioned {
            rows.push(memory::partitioned_row(split, &single, limit));
        }
    }
    if let Some(figures) = &results.keys {
        keys::rows(&mut rows, figures);
    }
    if let Some(figures) = &results.reclaim {
        reclaim::rows(&mut rows, figures);
    }
    if let Some(figures) = &results.bounds {
        bounds::rows(&mut rows, figures);
    }
    rows
}
