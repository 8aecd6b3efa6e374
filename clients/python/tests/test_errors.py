"""How an error answer becomes an exception, for the statuses the real server cannot be made
to answer on demand in a test run (`429`, `5xx`): `error_for` is what both clients call with
every answer of status 400 or more."""

import unittest

import memlayer
from memlayer._errors import error_for


class ErrorForTest(unittest.TestCase):
    def test_rate_limited_carries_retry_after(self):
        body = {"error": {"code": "rate_limited", "message": "too many requests"}}
        error = error_for(429, {"retry-after": "2", "x-request-id": "r1"}, body)
        self.assertIsInstance(error, memlayer.RateLimitedError)
        self.assertEqual(
            (error.status, error.code, error.message), (429, "rate_limited", "too many requests")
        )
        self.assertEqual((error.retry_after, error.request_id), (2.0, "r1"))

    def test_every_5xx_is_a_server_error(self):
        for status, code in ((503, "overloaded"), (507, "storage_full"), (502, "upstream_failed")):
            error = error_for(
                status, {"retry-after": "1"}, {"error": {"code": code, "message": "m"}}
            )
            self.assertIsInstance(error, memlayer.ServerError)
            self.assertEqual((error.status, error.code), (status, code))
        self.assertIsNone(error_for(504, {}, None).retry_after)

    def test_statuses_pick_their_classes(self):
        expected = {
            400: memlayer.InvalidRequestError,
            401: memlayer.UnauthorizedError,
            403: memlayer.ForbiddenError,
            404: memlayer.NotFoundError,
            409: memlayer.ConflictError,
            413: memlayer.InvalidRequestError,
            415: memlayer.InvalidRequestError,
            422: memlayer.UnprocessableError,
        }
        for status, kind in expected.items():
            self.assertIs(
                type(error_for(status, {}, {"error": {"code": "c", "message": "m"}})), kind
            )
        self.assertIs(type(error_for(405, {}, None)), memlayer.MemlayerError)

    def test_an_answer_that_is_not_memlayers_error_shape(self):
        # A proxy in front of the server may answer with its own body.
        error = error_for(502, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, "<html>")
        self.assertEqual((error.status, error.code, error.message), (502, "http_error", "HTTP 502"))
        self.assertIsNone(error.retry_after)


if __name__ == "__main__":
    unittest.main()
