// The OpenFeature web SDK through the OFREP web provider, for tests/e2e/test_ofrep_javascript.py: one bulk
// evaluation for the context CONTEXT (JSON), then one line of JSON: `flags`, the keys the provider received,
// sorted, and `details`, key -> the evaluation details of each flag of argv[2], a JSON array of {key, type,
// default} (type: boolean, string, number or object), read from what it received.
// SERVICE_URL is the service; HEADERS a JSON array of [name, value] pairs that carry the token.
import { OpenFeature } from "@openfeature/web-sdk";
import { OFREPWebProvider } from "@openfeature/ofrep-web-provider";

const provider = new OFREPWebProvider({ baseUrl: process.env.SERVICE_URL, headers: JSON.parse(process.env.HEADERS) });
await OpenFeature.setContext(JSON.parse(process.env.CONTEXT));
await OpenFeature.setProviderAndWait(provider);
const client = OpenFeature.getClient();
const getters = {
  boolean: client.getBooleanDetails,
  string: client.getStringDetails,
  number: client.getNumberDetails,
  object: client.getObjectDetails,
};
const details = {};
for (const { key, type, default: defaultValue } of JSON.parse(process.argv[2])) {
  details[key] = getters[type].call(client, key, defaultValue);
}
console.log(JSON.stringify({ flags: Object.keys(provider.flagCache).sort(), details }));
await OpenFeature.close();
