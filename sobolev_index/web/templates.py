"""The pages' Jinja templates, kept as strings so that the package needs no
data files. Each extends Datasette's ``base.html`` (its header, menu and
styles) and lays out the dicts of ``pages.py``; Jinja escapes every value.
"""

__all__ = ["SEARCH", "DOCUMENT", "EXPLAIN"]

_STYLE = """
<style>
  .sobolev-form { margin-bottom: 1.2em; }
  .sobolev-form label { display: inline-block; margin-right: 1em; font-weight: normal; }
  .sobolev-form input[name=q] { width: 28em; max-width: 90vw; display: inline-block; }
  .sobolev-form input[name=p] { width: 4em; display: inline-block; }
  .sobolev-form input[type=number] { width: 5em; display: inline-block; }
  .sobolev-error { color: #a00; font-weight: bold; }
  .sobolev-note { color: #666; }
  table.sobolev td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .sobolev-text { white-space: pre-wrap; max-width: 60em; }
  details.sobolev-explain { margin: 0.2em 0 0.6em 0; }
</style>
"""

_MAIN = """{% extends "base.html" %}
{% block title %}{{ title }}{% endblock %}
{% block extra_head %}""" + _STYLE + """{% endblock %}
{% block crumbs %}{{ crumbs.nav(request=request, database=database) }}{% endblock %}
{# One row per group (the subtree below a node, over every root's tree):
   over several roots the number of trees it spans (their positions in the
   cell's title), over one root that root's position. The masses are those
   of the group's largest pair. #}
{% macro explanation_table(e, a, b) %}
{% set several = e.roots|length > 1 %}
<table class="sobolev explanation">
  <thead><tr><th>share</th><th>{{ "roots" if several else "root" }}</th><th>edge</th>
    <th>mass here</th><th>mass there</th><th>{{ a }}</th><th>{{ b }}</th></tr></thead>
  {% for group in e.groups %}
  <tr><td class="num">{{ "%.1f"|format(100 * group.share) }}%</td>
    {% if several %}<td class="num" title="roots {{ group.roots|join(", ") }}">{{
      group.roots|length }}</td>{% else %}<td>{{ group.root }}</td>{% endif %}
    <td>{{ group.edge }}</td><td class="num">{{ "%.3f"|format(group.mass_a) }}</td>
    <td class="num">{{ "%.3f"|format(group.mass_b) }}</td>
    <td>{{ side(group, "a") }}</td><td>{{ side(group, "b") }}</td></tr>
  {% endfor %}
</table>
{% endmacro %}
{% macro error_page() %}
<h1>{{ database }}</h1>
<p class="sobolev-error" id="error">{{ error }}</p>
<p><a href="{{ search_url }}">Search</a></p>
{% endmacro %}
"""

SEARCH = _MAIN + """
{% block content %}
<h1>Search {{ database }}</h1>
<p class="sobolev-note">{{ "{:,}".format(page.documents) }} documents; exact nearest neighbours
under the Sobolev transport distance S_p.
<a href="{{ urls.database(database) }}">Tables and SQL</a></p>
{% if points %}
<form class="sobolev-form" action="{{ search_url }}" method="post" enctype="multipart/form-data">
  <input type="hidden" name="csrftoken" value="{{ csrftoken() }}">
  <label>Point sets ({{ "JSON lines" if page.kind == "clouds" else "a diagram file" }}):
    <input type="file" name="points"></label>
{% else %}
<form class="sobolev-form" action="{{ search_url }}" method="get">
  <label><input type="text" name="q" value="{{ page.query or "" }}" autofocus
    placeholder="words to search for"></label>
{% endif %}
  <label>k <input type="number" name="k" min="1" max="{{ max_k }}" value="{{ page.k }}"></label>
  <label>p <input type="text" name="p" size="4" value="{{ p_text }}"></label>
  <input type="submit" value="Search">
</form>
{% if error %}<p class="sobolev-error" id="error">{{ error }}</p>{% endif %}
{% for message in page.warnings %}<p class="sobolev-note">warning: {{ message }}</p>{% endfor %}
{% for query in page.queries %}
  {% if page.queries|length > 1 or points %}<h2>{{ query.query }}</h2>{% endif %}
  <table class="sobolev" id="results{% if not loop.first %}-{{ loop.index }}{% endif %}">
    <thead><tr><th>rank</th><th>distance</th><th>key</th><th>label</th><th>text</th></tr></thead>
    <tbody>
    {% for hit in query.results %}
      <tr><td class="num">{{ hit.rank }}</td><td class="num">{{ "%.4f"|format(hit.distance) }}</td>
        <td><a href="{{ document_url(hit.key) }}">{{ hit.key }}</a></td>
        <td>{{ hit.label if hit.label is not none else "" }}</td><td>{{ hit.text or "" }}</td></tr>
    {% endfor %}
    </tbody>
  </table>
{% endfor %}
<p class="sobolev-note"><a href="{{ json_url }}">JSON</a></p>
{% endblock %}
"""

DOCUMENT = _MAIN + """
{% block content %}
{% if error %}{{ error_page() }}{% else %}
<h1>{{ page.key }}</h1>
<p><a href="{{ search_url }}">Search</a> &middot; <a href="{{ json_url }}">JSON</a></p>
<table class="sobolev" id="fields">
  <tr><th>label</th><td>{{ page.label if page.label is not none else "" }}</td></tr>
  <tr><th>added</th><td>{{ page.added_at or "" }}</td></tr>
  <tr><th>support</th><td>{{ page.supports }} node(s)</td></tr>
  {% for name, value in page.fields.items() %}
  <tr><th>{{ name }}</th><td>{{ value }}</td></tr>
  {% endfor %}
</table>
{% if page.text %}<div class="sobolev-text">{{ page.text }}</div>{% endif %}
<h2>{{ page.neighbours|length }} nearest documents (p = {{ page.p }})</h2>
<form class="sobolev-form" action="{{ document_base }}" method="get">
  <input type="hidden" name="key" value="{{ page.key }}">
  <label>k <input type="number" name="k" min="1" max="{{ max_k }}" value="{{ page.k }}"></label>
  <label>p <input type="text" name="p" size="4" value="{{ p_text }}"></label>
  <input type="submit" value="Show">
</form>
<table class="sobolev" id="neighbours">
  <thead><tr><th>rank</th><th>distance</th><th>key</th><th>label</th>
    <th>text, and why it is this far</th></tr></thead>
  <tbody>
  {% for hit in page.neighbours %}
  <tr><td class="num">{{ hit.rank }}</td><td class="num">{{ "%.4f"|format(hit.distance) }}</td>
    <td><a href="{{ document_url(hit.key) }}">{{ hit.key }}</a></td>
    <td>{{ hit.label if hit.label is not none else "" }}</td>
    <td>{{ hit.text or "" }}
      {% set e = hit.explanation %}
      {% if e is none %}
      <p class="sobolev-note"><a href="{{ explain_url(hit.key) }}">explain</a></p></td></tr>
      {% else %}
      <details class="sobolev-explain"><summary>explain: the {{ e.groups|length }} subtrees carrying
        {{ "%.1f"|format(100 * e.shown_share) }}% of the distance
        ({{ "{:,}".format(e.n_groups) }} differ)</summary>
        {{ explanation_table(e, page.key, hit.key) }}
      </details></td></tr>
      {% endif %}
  {% endfor %}
  </tbody>
</table>
{% endif %}
{% endblock %}
"""

EXPLAIN = _MAIN + """
{% block content %}
{% if error %}{{ error_page() }}{% else %}
<h1><a href="{{ document_url(page.a) }}">{{ page.a }}</a> and
  <a href="{{ document_url(page.b) }}">{{ page.b }}</a></h1>
<p>S_p = {{ "%.4f"|format(page.distance) }} (p = {{ page.p }}); the
  {{ page.explanation.groups|length }} subtrees carrying
  {{ "%.1f"|format(100 * page.explanation.shown_share) }}% of it
  ({{ "{:,}".format(page.explanation.n_groups) }} differ).
  <a href="{{ json_url }}">JSON</a></p>
<div id="explanation">{{ explanation_table(page.explanation, page.a, page.b) }}</div>
{% endif %}
{% endblock %}
"""
