"""What the explorer tests share: the parts of an explorer page (insight/explorer_html.py) and the bound it states."""
import base64
import json
import re

QUANTISATION_ERROR = 7.7e-6  # the bound insight/explorer_html.py states: half a step of 1/65535, and float32 rounding


def page_parts(page: str):
    meta = json.loads(re.search(r'<script type="application/json" id="meta">(.*?)</script>', page, re.S).group(1))
    blob = base64.b64decode(re.search(r'<script type="text/plain" id="weights">(.*?)</script>', page, re.S).group(1))
    return meta, blob
