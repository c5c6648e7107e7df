"""SearchQA: knowledge-base generation and BM25 index build time, corpus size, query latency, oracle success on the
test items, env steps/s in-process and over HTTP, and the server's memory over create/reset/step/close cycles.

    OMP_NUM_THREADS=1 .venv/bin/python bench/env_searchqa.py [--cycles 10000]   # -> bench/results/env_searchqa.json
    OMP_NUM_THREADS=1 .venv/bin/python bench/env_searchqa.py --cycles 10 --items 20 --out <file>   # a quick run

Everything is built from scratch in a temporary outputs folder (AGENTGYM_NB_OUTPUTS), so the build times are real.
The machine is shared: treat timings as rough.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from _common import commit, machine  # bench/_common.py

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agentgym_nb.envs.http import start_server  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "env_searchqa.json"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10_000, help="create/reset/step/close cycles for the RSS check")
    parser.add_argument("--items", type=int, default=None, help="the expert on only the first N items (quick runs)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    outputs = tempfile.mkdtemp(prefix="searchqa_bench_")
    os.environ["AGENTGYM_NB_OUTPUTS"] = outputs
    result = {"benchmark": "env_searchqa", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine()}

    from agentgym_nb.envs import connect, item_ids, make
    from agentgym_nb.envs.searchqa import ACTION, load_library
    from agentgym_nb.envs.searchqa_corpus import build, generate

    start = time.perf_counter()
    world = generate(0)
    generate_s = time.perf_counter() - start
    start = time.perf_counter()
    paths = build()
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    library = load_library(paths["corpus"], paths["test"], paths["train"])
    index_s = time.perf_counter() - start
    load = subprocess.run([sys.executable, "-c", "import time; from agentgym_nb.envs import make; "
                           "t = time.perf_counter(); make('searchqa'); print(time.perf_counter() - t)"],
                          capture_output=True, text=True, check=True)
    result["knowledge_base"] = {
        "passages": len(library.corpus), "corpus_mib": os.path.getsize(paths["corpus"]) / 2**20,
        "index_vocabulary": len(library.bm25.model.vocab_dict),
        "questions": {"test": library.n_test, "train": len(library.items) - library.n_test,
                      "2-hop": sum(item.source == "2-hop" for item in library.items)},
        "generate_seconds": generate_s, "generate_and_write_seconds": build_s,
        "scan_and_bm25_index_seconds": index_s,
        "fresh_process_first_make_seconds": float(load.stdout),  # imports searchqa (fastapi) + loads the cache
        }
    del world
    print(json.dumps(result["knowledge_base"], indent=1))

    env = make("searchqa")
    queries = [ACTION.search(env.expert(i)[0]).group(2) for i in range(len(library.items))[:args.items]]
    queries += [item.question for item in library.items[:args.items]]
    latencies = []
    cpu = time.process_time()
    for query in queries:
        start = time.perf_counter()
        env.retriever.search(query, 3)
        latencies.append((time.perf_counter() - start) * 1000)
    cpu_ms = (time.process_time() - cpu) * 1000 / len(queries)
    latencies.sort()
    result["query_ms"] = {"queries": len(latencies), "median": statistics.median(latencies),
                          "p95": latencies[int(0.95 * len(latencies))], "max": latencies[-1], "mean_cpu": cpu_ms,
                          "what": "entity names and whole questions, top-3 over the whole corpus, one thread; "
                                  "wall times suffer from other load, mean_cpu does not"}

    def play(environment, items):
        solved = steps = 0
        start = time.perf_counter()
        for item in items:
            environment.reset(item)
            for reply in env.expert(item):
                step = environment.step(reply)
                steps += 1
            solved += step.done and step.reward == 1.0
        return solved, steps, time.perf_counter() - start

    test = item_ids("searchqa", "test")[:args.items]
    every = list(range(len(library.items)))[:args.items]
    solved, steps, seconds = play(env, every)
    solved_test, _, _ = play(env, test)
    result["expert"] = {"test_items": len(test), "test_solved": solved_test,
                        "test_success_rate": solved_test / len(test),
                        "all_items": len(every), "all_solved": solved}
    result["in_process"] = {"steps": steps, "seconds": seconds, "steps_per_s": steps / seconds,
                            "what": f"expert episodes over {len(every)} of the {len(library.items)} items "
                                    "(searches and answers)"}
    print(json.dumps({k: result[k] for k in ("query_ms", "expert", "in_process")}, indent=1))

    os.environ["OMP_NUM_THREADS"] = "1"   # the server's: the measurement is one server process on one core
    server, url = start_server("searchqa", timeout=120)
    try:
        remote = connect("searchqa", url)
        solved, steps, seconds = play(remote, test)
        remote.close()
        result["http"] = {"client": "envs.connect (one session, sequential)", "steps": steps, "seconds": seconds,
                          "steps_per_s": steps / seconds, "test_solved": solved}
        session = requests.Session()
        samples = [(0, rss_mib(server.pid))]
        start = time.perf_counter()
        for cycle in range(1, args.cycles + 1):
            env_idx = session.post(f"{url}/create", json={"id": 0}, timeout=60).json()
            session.post(f"{url}/reset", json={"env_idx": env_idx, "id": cycle % len(every)}, timeout=60)
            session.post(f"{url}/step", json={"env_idx": env_idx, "action": f"<search>{queries[cycle % len(queries)]}"
                                                                             "</search>"}, timeout=60)
            assert session.post(f"{url}/close", json={"env_idx": env_idx}, timeout=60).json() is True
            if cycle % 2000 == 0 or cycle == args.cycles:
                samples.append((cycle, rss_mib(server.pid)))
        seconds = time.perf_counter() - start
        result["server_memory"] = {
            "cycle": "/create, /reset, /step <search>, /close (AgentGym's SearchQA wire format)",
            "cycles": args.cycles, "seconds": seconds, "requests_per_s": 4 * args.cycles / seconds,
            "rss_mib_before": samples[0][1], "rss_mib_after": samples[-1][1],
            "rss_mib_by_cycle": samples}
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(json.dumps({k: result[k] for k in ("http", "server_memory")}, indent=1))
    shutil.rmtree(outputs, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
