"""The client TLS context, configured from ``SecuritySettings`` (part of the client core).

``ssl_context`` reads the CA, certificate and key files named by the settings and returns an
``ssl.SSLContext`` the shells wrap their sockets in (TLS from the first byte on SSL and
SASL_SSL). Like librdkafka, the server certificate is verified and its host name checked unless
``ssl.endpoint.identification.algorithm=none`` (or ``enable.ssl.certificate.verification`` is
false). No socket is touched here.
"""

from __future__ import annotations

import ssl

from client.security import SecurityConfigError, SecuritySettings

__all__ = ["ssl_context"]


def ssl_context(settings: SecuritySettings) -> ssl.SSLContext | None:
    """The client TLS context for the settings (None for PLAINTEXT and SASL_PLAINTEXT).

    Raises:
        SecurityConfigError: a certificate, key or CA file cannot be read or used (the message
            names the property, never a password).
    """
    if not settings.uses_tls:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.ssl_ca_location or settings.ssl_ca_pem:
        try:
            if settings.ssl_ca_location:
                ctx.load_verify_locations(cafile=settings.ssl_ca_location)
            if settings.ssl_ca_pem:
                ctx.load_verify_locations(cadata=settings.ssl_ca_pem)
        except (OSError, ssl.SSLError) as exc:
            raise SecurityConfigError(f"cannot load the CA certificates (ssl.ca.location="
                                      f"{settings.ssl_ca_location}): {_why(exc)}") from None
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if settings.ssl_certificate_location:
        try:
            ctx.load_cert_chain(settings.ssl_certificate_location, settings.ssl_key_location,
                                password=settings.ssl_key_password or None)
        except (OSError, ssl.SSLError) as exc:
            raise SecurityConfigError(
                f"cannot load the client certificate (ssl.certificate.location="
                f"{settings.ssl_certificate_location}, ssl.key.location="
                f"{settings.ssl_key_location}): {_why(exc)}; check the files and "
                "ssl.key.password") from None
    ctx.check_hostname = settings.check_hostname and settings.verify_certificate
    if not settings.verify_certificate:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return type(exc).__name__

