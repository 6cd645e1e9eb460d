"""The "DLC jobs" pages in the Airflow UI: the plugin's FastAPI app (app.py) and its HTML (render.py)."""
