from pathlib import Path

import pytest

from airflow_provider_staged.staging.settings import StagedSettings


def test_from_fields_defaults(tmp_path):
    settings = StagedSettings.from_fields("127.0.0.1", 9083, None, tmp_path)
    assert settings.metastore_uri == "thrift://127.0.0.1:9083"
    assert settings.journal_dir == str(tmp_path / "journal")
    assert settings.atomic is True


def test_from_fields_extras(tmp_path):
    settings = StagedSettings.from_fields(
        "h",
        1,
        '{"atomic": "false", "keep_versions": 0, "max_version_age_hours": 1, '
        '"attempt_ttl_minutes": 0.5, "spark_conf": {"a": 1}}',
        Path(tmp_path),
    )
    assert settings.atomic is False
    assert settings.retention.keep_versions == 0
    assert settings.retention.max_age_seconds == 3600
    assert settings.attempt_ttl_seconds == 30
    assert settings.spark_conf == {"a": "1"}


@pytest.mark.parametrize(
    ("extras", "message"),
    [
        ({"atomicity": True}, "unknown staged connection extra"),
        ({"atomic": "maybe"}, "invalid connection extra atomic 'maybe'"),
        ({"keep_versions": "two"}, "keep_versions='two'"),
        ({"spark_conf": "x=1"}, "spark_conf='x=1'"),
    ],
)
def test_from_fields_rejects_bad_extras(tmp_path, extras, message):
    with pytest.raises(ValueError, match=message):
        StagedSettings.from_fields("h", 1, extras, tmp_path)


def test_from_fields_needs_host_and_port(tmp_path):
    with pytest.raises(ValueError, match=r"host\(s\) and port"):
        StagedSettings.from_fields("", None, None, tmp_path)


def test_blank_form_fields_are_the_defaults(tmp_path):
    """The connection form stores a field left blank as null (or ""): the default, not an error."""
    blank = {name: None for name in ("warehouse", "journal_dir", "atomic", "keep_versions", "spark_conf")}
    settings = StagedSettings.from_fields("h", 1, {**blank, "attempt_ttl_minutes": ""}, tmp_path)
    assert settings == StagedSettings.from_fields("h", 1, None, tmp_path)
