// The experiment `checkout-button` evaluated as an OpenFeature flag by the JavaScript server SDK and its OFREP
// provider (`npm install @openfeature/server-sdk @openfeature/ofrep-provider @openfeature/ofrep-core`):
//
//     SERVICE_URL=http://localhost:8000 TOKEN=... node server.mjs u1
//
// prints the evaluation's details as one JSON line; an error goes to stderr with exit status 1.
import { OpenFeature } from "@openfeature/server-sdk";
import { OFREPProvider } from "@openfeature/ofrep-provider";

const provider = new OFREPProvider({
  // With no trailing slash: the provider appends /ofrep/v1/... to it as it is.
  baseUrl: process.env.SERVICE_URL ?? "http://localhost:8000",
  headers: [["Authorization", `Bearer ${process.env.TOKEN}`]],
});
await OpenFeature.setProviderAndWait(provider);
const client = OpenFeature.getClient();

const targetingKey = process.argv[2] ?? "u1";
// The default value is what the app shows when the service cannot answer: the control's.
const details = await client.getStringDetails("checkout-button", "control", { targetingKey });
if (details.errorCode) {
  // The SDK throws nothing: a failed evaluation answers the default value, with the error in its details.
  console.error(`${details.errorCode}: ${details.errorMessage}`);
  process.exit(1);
}
const { value, variant, reason, flagMetadata } = details;
console.log(JSON.stringify({ value, variant, reason, flagMetadata }));
