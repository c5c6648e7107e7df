"""python -m agentgym_nb.envs serve babyai --port 36002 [--host 127.0.0.1] [--workers N] [--set key=value ...]

--workers N starts N server processes on ports port..port+N-1; clients spread their envs over them with
`envs.connect(name, ["http://host:port", "http://host:port+1", ...])`.

--set key=value (repeatable) passes a keyword option to the env's constructor, e.g. the Search-R1 files of SearchQA:
    python -m agentgym_nb.envs serve searchqa --set corpus=wiki-18.jsonl --set test=test.parquet \\
        --set train=train.parquet
A value is read as JSON when it is JSON (numbers, true/false, null, lists such as '["a.jsonl", "b.jsonl"]'), else
as text (a path).

python -m agentgym_nb.envs expert-turns babyai   writes the table of the turns the env's expert needs per shipped
item (agentgym_nb/data/items/babyai_expert_turns.json), which envs.expert_turns reads instead of playing the expert.
"""
import argparse
import inspect
import json

from . import ENV_NAMES, env_class, serve
from .http import serve_workers
from .registry import write_expert_turns


def constructor_options(name: str, pairs: list[str]) -> dict:
    """["corpus=wiki.jsonl", "page_load_timeout=60"] -> {"corpus": "wiki.jsonl", "page_load_timeout": 60}, checked
    against the parameters of env `name`'s constructor; ValueError naming the valid ones otherwise."""
    parameters = inspect.signature(env_class(name).__init__).parameters
    valid = [p for p in list(parameters)[1:] if parameters[p].kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                                             inspect.Parameter.VAR_KEYWORD)]
    any_key = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    options = {}
    for pair in pairs:
        key, equals, raw = pair.partition("=")
        key = key.strip()
        if not equals or not key:
            raise ValueError(f"--set {pair!r}: expected key=value, e.g. --set corpus=wiki-18.jsonl")
        if key not in valid and not any_key:
            takes = f"its options are: {', '.join(valid)}" if valid else "it takes no options"
            raise ValueError(f"--set {key}: {name} has no option {key!r}; {takes}")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentgym_nb.envs",
                                     description="Serve an environment over AgentGym's HTTP protocol, or tabulate "
                                                 "its expert's turns.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the HTTP server for one environment")
    serve_parser.add_argument("name", help=f"environment: {', '.join(ENV_NAMES)}")
    serve_parser.add_argument("--host", default="127.0.0.1")
    serve_parser.add_argument("--port", type=int, default=36002)
    serve_parser.add_argument("--workers", type=int, default=1,
                              help="server processes, on ports port..port+workers-1 (each with its own envs)")
    serve_parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="options",
                              help="an option of the env's constructor (repeatable), e.g. --set corpus=wiki.jsonl")
    table_parser = commands.add_parser("expert-turns", help="play the expert on every shipped item and write the "
                                                            "table envs.expert_turns reads")
    table_parser.add_argument("name", help=f"environment: {', '.join(ENV_NAMES)}")
    args = parser.parse_args(argv)
    if args.command == "expert-turns":
        try:
            env_class(args.name)
        except ValueError as error:
            parser.error(str(error))
        print(write_expert_turns(args.name))
        return
    try:
        options = constructor_options(args.name, args.options)
    except ValueError as error:
        parser.error(str(error))
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    if args.workers == 1:
        serve(args.name, host=args.host, port=args.port, **options)
    else:
        serve_workers(args.name, host=args.host, port=args.port, workers=args.workers, **options)


if __name__ == "__main__":
    main()
