"""AppTests of the Streamlit pages (``views/``), one file per page; ``test_app.py`` is the Layout page ``app.py`` opens."""
