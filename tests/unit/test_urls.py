"""The one URL redaction (runnerq_fast.urls): every credential form masked, nothing else changed, never raises."""

from __future__ import annotations

import pytest

from runnerq_fast.urls import redact_text, redact_url, url_secrets


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:pw1@db:5432/app", "postgresql://app:***@db:5432/app"),
        ("postgresql://app@db/app?password=pw1", "postgresql://app@db/app?password=***"),
        ("postgresql://app@db/app?sslmode=require&password=pw1&x=1", "postgresql://app@db/app?sslmode=require&password=***&x=1"),
        ("postgresql://app@db/app?PASSWORD=pw1", "postgresql://app@db/app?PASSWORD=***"),
        ("postgresql://app@db/app?sslpassword=pw1", "postgresql://app@db/app?sslpassword=***"),
        ("redis://:pw1@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://user:pw1@127.0.0.1:6379/0?password=pw2", "redis://user:***@127.0.0.1:6379/0?password=***"),
        ("rediss://h/0?passwd=pw1#frag", "rediss://h/0?passwd=***#frag"),
        ("postgresql://u:p%40w@[::1/x?password=z", "postgresql://u:***@[::1/x?password=***"),  # does not parse
        ("postgresql://[::1/x", "postgresql://[::1/x"),
        ("postgresql://postgres@127.0.0.1/app", "postgresql://postgres@127.0.0.1/app"),
        # a password holding "/", "?", "#" or "[/x]" unencoded (drivers refuse the URL; its text must not leak)
        ("postgresql://postgres:s3cr/et@127.0.0.1:5432/nodb", "postgresql://postgres:***@127.0.0.1:5432/nodb"),
        ("redis://:s3cr/et@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://:s3cr?et@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("postgresql://postgres:s3cr#et@127.0.0.1:5432/x", "postgresql://postgres:***@127.0.0.1:5432/x"),
        ("postgresql://postgres:s3cr[/x]et@127.0.0.1:5432/nodb", "postgresql://postgres:***@127.0.0.1:5432/nodb"),
        ("postgresql://u:ab/cd==@db/app", "postgresql://u:***@db/app"),
        ("postgresql://u:a@b/c@db/app", "postgresql://u:***@db/app"),
        ("sqlite:///tmp/a:b@c/q.db", "sqlite:///tmp/a:b@c/q.db"),
        ("sqlite:///runnerq.db", "sqlite:///runnerq.db"),
        ("memory://", "memory://"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url_masks_every_credential_form(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_url_secrets_lists_raw_and_decoded_passwords() -> None:
    assert url_secrets("postgresql://u:p%40w@h/db?password=zz") == ["p%40w", "p@w", "zz"]
    assert url_secrets("postgresql://u@h/db") == []
    # and the pieces of a password a driver may quote after splitting the URL at its "/"
    assert url_secrets("postgresql://u:s3cr/et@h:5432/db") == ["s3cr/et", "s3cr", "et"]


def test_redact_text_masks_the_url_and_a_repeated_secret_but_not_longer_words() -> None:
    url = "postgresql://postgres@h/db?password=postgres"
    text = f"cannot connect to {url}: server said postgres is wrong (postgresql)"
    assert redact_text(text, url) == (
        "cannot connect to postgresql://postgres@h/db?password=***: server said *** is wrong (postgresql)"
    )
    assert redact_text("anything", None) == "anything"


def test_redact_text_masks_the_piece_of_a_password_a_driver_quotes() -> None:
    url = "postgresql://postgres:s3cr/et@127.0.0.1:5432/nodb"
    text = f"invalid PostgreSQL URL {url}: invalid literal for int() with base 10: 's3cr'"
    shown = redact_text(text, url)
    assert "s3cr" not in shown and "/et@" not in shown, shown
    assert shown == ("invalid PostgreSQL URL postgresql://postgres:***@127.0.0.1:5432/nodb: "
                     "invalid literal for int() with base 10: '***'")
