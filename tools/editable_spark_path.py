"""Put `pipeline/autoload` on the sys.path of an editable install, so PySpark finds
`pyspark_herald` there.

PySpark 4 looks for Python data sources with `pkgutil.iter_modules()`, which sees only
folders on sys.path. A wheel puts `pyspark_herald` in site-packages; an editable install of
herald's mapped folders (`herald.core` = `core`, ...) is served by setuptools' import finder
instead, which `iter_modules` does not list. This writes a one-line .pth naming the folder
that holds the module, the way a wheel's site-packages would hold it. `make install` runs it.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

PTH = "heraldmq-spark-autoload.pth"


def main() -> None:
    folder = Path(__file__).resolve().parent.parent / "pipeline" / "autoload"
    target = Path(sysconfig.get_paths()["purelib"]) / PTH
    target.write_text(f"{folder}\n")
    print(f"{target}: {folder}")


if __name__ == "__main__":
    main()
