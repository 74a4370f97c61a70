// Package fidelity pins egrid's Azure Event Grid fidelity from the outside: its tests build
// the real egrid binary, run `egrid serve` over HTTPS on 127.0.0.1, and drive it with the
// clients Event Grid users have — the official Azure SDK publisher (azeventgrid), the
// CloudEvents Go SDK (sender and receiver) and curl-shaped raw HTTP — against webhook endpoints
// that record what they get.
//
// Each test is one row of Azure's behaviour, and its comment names where that behaviour is
// written down: a seed article (/work/shared/seeds), a Learn page, or an Azure response quoted
// in a public issue. The rows:
//
//   - publishing: Microsoft's curl quickstart (form-urlencoded Content-Type, eventTime offset
//     without colon) is accepted; the Azure SDK's events and CloudEvents are accepted; the
//     CloudEvents SDK's binary and structured sends are accepted;
//   - publish answers: 200 with an empty body (classic) or {} (namespace), 400 with detail code
//     InputJsonInvalid naming an unexpected property, 400 for a malformed SAS token, 401 (an
//     unknown topic too), 413; the Azure SDK surfaces them as *azcore.ResponseError;
//   - deliveries: the aeg-* headers, Content-Type, body shapes (Event Grid array of one; one
//     structured CloudEvent), topic IDs built from the server's azureSubscriptionId and
//     resourceGroup, dataschema "#"+dataVersion on converted events, Origin after the
//     CloudEvents handshake; the CloudEvents SDK receiver accepts native CloudEvents deliveries
//     and refuses converted ones exactly as it refuses Azure's (cloudevents/sdk-go#615);
//   - handshakes: the SubscriptionValidation event on create and on every update, the
//     CloudEvents OPTIONS request, the SubscriptionDeletion notification on delete.
//
// Timing rows (retry schedules, floors, Retry-After) are pinned in virtual time by the golden
// delivery timelines of package actors and the tests of router/retry, not here: these tests
// wait on channels with deadlines and assert outcomes, never durations.
//
// The package has no code of its own besides this file; its tests import only the module's
// public surface through the binary, plus the two SDKs, so they see egrid as a user does.
package fidelity
