"""Print the first shell block of a Markdown file (README's install-and-run command), for
CI to run as written."""

import re
import sys
from pathlib import Path

blocks = re.findall(r"^```bash\n(.*?)^```", Path(sys.argv[1]).read_text(encoding="utf-8"),
                    flags=re.S | re.M)
if not blocks:
    sys.exit(f"{sys.argv[1]} has no bash block")
print(blocks[0], end="")
