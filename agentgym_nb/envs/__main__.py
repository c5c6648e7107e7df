"""python -m agentgym_nb.envs serve babyai --port 36002 [--host 127.0.0.1]"""
import argparse

from . import ENV_NAMES, env_class, serve


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentgym_nb.envs",
                                     description="Serve an environment over AgentGym's HTTP protocol.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the HTTP server for one environment")
    serve_parser.add_argument("name", help=f"environment: {', '.join(ENV_NAMES)}")
    serve_parser.add_argument("--host", default="127.0.0.1")
    serve_parser.add_argument("--port", type=int, default=36002)
    args = parser.parse_args(argv)
    try:
        env_class(args.name)
    except ValueError as error:
        parser.error(str(error))
    serve(args.name, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
