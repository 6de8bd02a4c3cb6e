#!/usr/bin/python
"""Ansible module: an S3 bucket on Ceph RGW with kvplan's lifecycle expiration rule.

Python standard library only (AWS Signature V4 by hand), so it runs on any host's Python without
boto3. It creates the bucket when it is missing, and makes the bucket's lifecycle rule
`kvplan-ttl` expire objects after `expiration_days` (or removes that rule when the spec has no
ttl). It never deletes a bucket or an object. Check mode reports what would change.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: kvplan_s3_bucket
short_description: Ensure an RGW bucket and its kvplan lifecycle expiration rule
description:
  - Creates the bucket if missing (on a placement target when C(location) is given).
  - Sets the lifecycle rule C(kvplan-ttl) to expire objects after C(expiration_days), or removes
    that rule when C(expiration_days) is empty. Other lifecycle rules are kept.
  - Never deletes a bucket or an object.
options:
  endpoint: {description: RGW URL, path-style (http://host:port), type: str, required: true}
  bucket: {description: Bucket name, type: str, required: true}
  region: {description: Signature V4 region (the zonegroup api_name), type: str, default: default}
  location: {description: LocationConstraint at creation, e.g. default:kvplan, type: str, default: ""}
  access_key: {description: S3 access key, type: str, required: true, no_log: true}
  secret_key: {description: S3 secret key, type: str, required: true, no_log: true}
  expiration_days: {description: Days after which objects expire; empty for no expiry, type: int}
author: kvplan
"""

import base64
import datetime
import hashlib
import hmac
import re
import urllib.error
import urllib.parse
import urllib.request
from xml.etree import ElementTree

from ansible.module_utils.basic import AnsibleModule

RULE_ID = "kvplan-ttl"
S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class S3:
    """Just enough S3 for a bucket and its lifecycle, signed with AWS Signature V4."""

    def __init__(self, endpoint: str, region: str, access_key: str, secret_key: str):
        self.endpoint = endpoint.rstrip("/")
        # The Host header urllib sends, which the signature must name: an IPv6 scope id's %25 read back as '%'.
        self.host = urllib.request.Request(self.endpoint).host
        self.region, self.access_key, self.secret_key = region, access_key, secret_key

    def request(self, method: str, path: str, query: str = "", body: bytes = b"", headers: dict | None = None):
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload = hashlib.sha256(body).hexdigest()
        hdrs = {"host": self.host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
        hdrs.update({k.lower(): v for k, v in (headers or {}).items()})
        signed = ";".join(sorted(hdrs))
        canonical = "\n".join([method, urllib.parse.quote(path), query,
                               "".join(f"{k}:{hdrs[k].strip()}\n" for k in sorted(hdrs)), signed, payload])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = _sign(_sign(_sign(_sign(("AWS4" + self.secret_key).encode(), day), self.region), "s3"), "aws4_request")
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        hdrs["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                 f"SignedHeaders={signed}, Signature={signature}")
        url = self.endpoint + urllib.parse.quote(path) + (f"?{query}" if query else "")
        req = urllib.request.Request(url, data=body if method in ("PUT", "POST") else None, method=method,
                                     headers={k: v for k, v in hdrs.items() if k != "host"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


def _rules(xml: bytes) -> list[ElementTree.Element]:
    root = ElementTree.fromstring(xml)
    return [el for el in root if el.tag.endswith("Rule")]


def _text(rule: ElementTree.Element, path: str) -> str | None:
    el = rule.find("/".join(f"{{{S3_NS}}}{p}" for p in path.split("/")))
    if el is None:
        el = rule.find(path)
    return el.text if el is not None else None


def _rule_xml(days: int) -> str:
    return (f"<Rule><ID>{RULE_ID}</ID><Filter><Prefix></Prefix></Filter><Status>Enabled</Status>"
            f"<Expiration><Days>{days}</Days></Expiration></Rule>")


def _error(status: int, body: bytes) -> str:
    code = re.search(rb"<Code>([^<]+)</Code>", body or b"")
    return f"HTTP {status}" + (f" {code.group(1).decode()}" if code else "")


def run(module: AnsibleModule) -> dict:
    p = module.params
    s3 = S3(p["endpoint"], p["region"], p["access_key"], p["secret_key"])
    bucket, days = p["bucket"], p["expiration_days"]
    path = f"/{bucket}"
    changes = []
    status, body = s3.request("HEAD", path)
    if status == 404:
        changes.append("bucket created")
        if not module.check_mode:
            config = b""
            if p["location"]:
                config = (f'<CreateBucketConfiguration xmlns="{S3_NS}"><LocationConstraint>{p["location"]}'
                          "</LocationConstraint></CreateBucketConfiguration>").encode()
            status, body = s3.request("PUT", path, body=config)
            if status != 200:
                module.fail_json(msg=f"creating bucket {bucket} at {p['endpoint']} failed: {_error(status, body)}")
    elif status != 200:
        module.fail_json(msg=f"bucket {bucket} at {p['endpoint']}: {_error(status, body)} "
                             "(check the RGW user's keys and that RGW is up)")

    others, current = [], None
    status, body = (404, b"") if "bucket created" in changes else s3.request("GET", path, "lifecycle=")
    if status == 200:
        for rule in _rules(body):
            if _text(rule, "ID") == RULE_ID:
                current = int(_text(rule, "Expiration/Days") or 0) if _text(rule, "Status") == "Enabled" else 0
            else:
                others.append(ElementTree.tostring(rule, encoding="unicode").replace(f"ns0:", "").replace(
                    f' xmlns:ns0="{S3_NS}"', ""))
    elif status != 404:
        module.fail_json(msg=f"reading the lifecycle of {bucket}: {_error(status, body)}")
    if current != days:
        changes.append(f"lifecycle expiration {current or 'none'} -> {days or 'none'} days")
        if not module.check_mode:
            rules = others + ([_rule_xml(days)] if days else [])
            if rules:
                xml = f'<LifecycleConfiguration xmlns="{S3_NS}">{"".join(rules)}</LifecycleConfiguration>'.encode()
                md5 = base64.b64encode(hashlib.md5(xml).digest()).decode()
                status, body = s3.request("PUT", path, "lifecycle=", xml, {"content-md5": md5,
                                                                          "content-type": "application/xml"})
            else:
                status, body = s3.request("DELETE", path, "lifecycle=")
            if status not in (200, 204):
                module.fail_json(msg=f"setting the lifecycle of {bucket}: {_error(status, body)}")
    return {"changed": bool(changes), "msg": "; ".join(changes) or f"bucket {bucket} as the spec says",
            "expiration_days": days}


def main() -> None:
    module = AnsibleModule(argument_spec={
        "endpoint": {"type": "str", "required": True},
        "bucket": {"type": "str", "required": True},
        "region": {"type": "str", "default": "default"},
        "location": {"type": "str", "default": ""},
        "access_key": {"type": "str", "required": True, "no_log": True},
        "secret_key": {"type": "str", "required": True, "no_log": True},
        "expiration_days": {"type": "int"},
    }, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
