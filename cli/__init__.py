"""The ``sobolev-index`` command line (installed as ``sobolev_index.cli``).

Commands hold no logic of their own: they parse options, call the Python
API, and print. Library errors become one ``Error: ...`` line.
"""
import json
import time

import click

from .. import __version__

__all__ = ["main"]


class _Group(click.Group):
    def invoke(self, ctx):
        from ..errors import SobolevIndexError

        try:
            return super().invoke(ctx)
        except (SobolevIndexError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sobolev-index")
def main():
    """Exact search and kernels for probability measures under Sobolev transport."""


@main.command()
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for data and graph.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
def quickstart(seed, as_json):
    """Run the core on synthetic point clouds the package makes itself.

    Makes bags of points from a few topics, builds a graph metric by
    farthest-point clustering, maps each bag to its Sobolev features, and
    classifies bags by their nearest neighbour under S_1 and sliced S_1.
    """
    from ..demo import synthetic_point_clouds, nearest_neighbour_report

    started = time.perf_counter()
    data = synthetic_point_clouds(seed=seed)
    report = nearest_neighbour_report(data, seed=seed)
    report["seconds_total"] = round(time.perf_counter() - started, 3)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"sobolev-index {__version__} quickstart (synthetic data, seed {seed})")
    click.echo(
        f"  {report['measures']} bags of {report['dim']}-d points, {report['topics']} topics, "
        f"{report['support_points']} support points in all"
    )
    click.echo(
        f"  graph: {report['nodes']} nodes, {report['edges']} edges "
        f"({report['graph_seconds']:.3f} s, farthest-point clustering + 'log' edges)"
    )
    click.echo(f"  features: {report['feature_nnz_per_measure']:.1f} nonzeros per measure "
               f"({report['feature_seconds']:.3f} s)")
    click.echo("  leave-one-out nearest-neighbour accuracy (chance is "
               f"{1 / report['topics']:.2f}):")
    for row in report["results"]:
        click.echo(f"    {row['distance']:<22} accuracy {row['accuracy']:.3f}   "
                   f"{row['pairs']} pairs in {row['seconds']:.3f} s")
    click.echo(f"done in {report['seconds_total']:.2f} s")


if __name__ == "__main__":  # pragma: no cover
    main()
