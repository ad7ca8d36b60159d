// The OpenFeature web SDK through the OFREP web provider (`npm install @openfeature/web-sdk
// @openfeature/ofrep-web-provider`), as a page runs it: one bulk evaluation of every experiment of the visitor's
// subject type when the page starts, each flag then read without a request, and a poll that the service answers
// 304 until an evaluation changes. Node 20 runs it as it is:
//
//     SERVICE_URL=http://localhost:8000 TOKEN=... SUBJECT_ID=u1 node browser.mjs
//
// (TOKEN a `client` token) prints the flag's details as one JSON line, and again each time they change.
import { OpenFeature, ProviderEvents } from "@openfeature/web-sdk";
import { OFREPWebProvider } from "@openfeature/ofrep-web-provider";

// A page takes these from its build configuration and its signed-in user.
const env = globalThis.process?.env ?? {};
const serviceUrl = env.SERVICE_URL ?? "http://localhost:8000";
const pollInterval = Number(env.POLL_INTERVAL_MS ?? 30_000);

// The context is set before the provider, whose first bulk evaluation is made for it.
await OpenFeature.setContext({ targetingKey: env.SUBJECT_ID ?? "u1", subjectType: "user" });
await OpenFeature.setProviderAndWait(
  new OFREPWebProvider({
    baseUrl: serviceUrl,
    // [name, value] pairs: the web provider spreads its headers, so an object of them would throw.
    headers: [["Authorization", `Bearer ${env.TOKEN}`]],
    // Without it the provider never polls (its default is 0).
    pollInterval,
  }),
);
const client = OpenFeature.getClient();

function show() {
  const { value, variant, reason, flagMetadata, errorCode } = client.getStringDetails("checkout-button", "control");
  console.log(JSON.stringify({ value, variant, reason, flagMetadata, errorCode }));
}
show();
client.addHandler(ProviderEvents.ConfigurationChanged, ({ flagsChanged }) => {
  if (flagsChanged?.includes("checkout-button")) show();
});
