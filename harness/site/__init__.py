"""The static dashboard of ``harness results publish OUT/``: plain HTML files that open from disk (file://) or a CI
artifact, with no server, no CDN and no fetch (a browser refuses fetch() under file://): every table is written
into its page, and the one small script (assets/site.js, inlined) only filters and sorts the rows already there.

- pages: the page shell (navigation, the inlined CSS and script) and tables.
- sets: one page per result set, its report.md rendered (markdown-it-py) with its figures copied beside it.
- trends: per board, cell and metric, the per-set medians (harness.results.history.metric_by_set) with the change
  points of harness.analysis.changes marked and listed.
- chart: a trend as inline SVG (milliseconds, where results trend's matplotlib figure takes seconds).
- publish: the whole site: index (the sets), boards, trends, sets.
"""
