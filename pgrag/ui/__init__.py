"""Where users look at pgrag: a local web page over the corpora a role may read
(``pgrag ui``) and the same picture of one retrieval as a self-contained HTML file
(``pgrag explain --html``). Server-rendered HTML and SVG from Jinja2 templates
with autoescaping; the stylesheet ships in the package and is inlined, so a page
loads nothing from anywhere else."""
