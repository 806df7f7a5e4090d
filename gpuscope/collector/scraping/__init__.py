"""Scraping: targets, fetching, parsing and checking pages, the per-target schedule,
and handing scrape outcomes to the store."""
